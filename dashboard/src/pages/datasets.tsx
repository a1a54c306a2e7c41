// Datasets: the list, upload through the three-step presigned flow (URL → PUT with a progress bar →
// process → poll until ready or failed), a dataset's versions with status and processing_error,
// preview, download, synthetic generation (POST /generate) and labelling existing texts.
import { useState } from 'preact/hooks';
import { api } from '../api.ts';
import {
  ConfirmButton,
  ErrorBox,
  Json,
  Loading,
  Section,
  Status,
  Table,
  fmtDate,
  useAction,
  useInterval,
  useResource,
} from '../ui.tsx';

const TYPES = ['ner', 'classification', 'decoder', 'custom'];
const PENDING = ['initialized', 'uploading', 'converting', 'validating'];

/** PUT with upload progress (fetch has none): resolves with the response status and body */
function put(url: string, file: Blob, onProgress: (f: number) => void): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const x = new XMLHttpRequest();
    x.open('PUT', url);
    x.upload.onprogress = (e) => {
      if (e.lengthComputable) onProgress(e.loaded / e.total);
    };
    x.onload = () => {
      let body: any = x.responseText;
      try {
        body = JSON.parse(x.responseText);
      } catch {
        /* text */
      }
      resolve({ status: x.status, body });
    };
    x.onerror = () => reject(new Error('The upload failed: the connection was lost'));
    x.send(file);
  });
}

export function DatasetsPage() {
  const list = useResource(() => api('GET', '/felix/datasets'));
  const pending = (list.data?.datasets ?? []).some((d: any) => PENDING.includes(d.status));
  useInterval(() => void list.reload(), 1000, pending);
  return (
    <>
      <h1>Datasets</h1>
      <Upload onDone={() => void list.reload()} />
      <Section title="Datasets">
        <ErrorBox error={list.error} />
        <Loading when={list.loading && !list.data} />
        {list.data && (
          <Table
            testid="datasets-table"
            head={['Name', 'Latest version', 'Status', 'Created']}
            rows={list.data.datasets}
            rowKey={(d: any) => d.dataset_name}
            rowAttrs={(d: any) => ({ 'data-dataset': d.dataset_name })}
            cells={(d: any) => [
              <a href={`#/datasets/${encodeURIComponent(d.dataset_name)}`}>{d.dataset_name}</a>,
              d.version_number,
              <Status value={d.status} />,
              fmtDate(d.created_at),
            ]}
            empty="No datasets yet."
          />
        )}
      </Section>
      <Generate onStarted={() => void list.reload()} />
      <LabelExisting />
    </>
  );
}

function Upload({ onDone }: { onDone: () => void }) {
  const [name, setName] = useState('');
  const [type, setType] = useState('ner');
  const [file, setFile] = useState<File | null>(null);
  const [progress, setProgress] = useState<number | null>(null);
  const [state, setState] = useState<string | null>(null);
  const act = useAction();
  const submit = (e: Event) => {
    e.preventDefault();
    if (!file) return;
    void act
      .run(async () => {
        setState('requesting an upload URL');
        setProgress(0);
        const u = await api('POST', '/felix/datasets/upload/url', {
          body: { dataset_name: name, dataset_type: type, filename: file.name },
        });
        setState('uploading');
        const r = await put(u.upload_url, file, setProgress);
        if (r.status !== 200) throw new Error(r.body?.detail ?? `The upload failed (HTTP ${r.status})`);
        setState('processing');
        await api('POST', '/felix/datasets/upload/process', { body: { dataset_name: name, upload_id: u.upload_id } });
        onDone();
        location.hash = `#/datasets/${encodeURIComponent(name)}`;
      })
      .finally(() => {
        setProgress(null);
        setState(null);
      });
  };
  return (
    <Section title="Upload a dataset (JSONL, CSV)">
      <form class="row" onSubmit={submit} data-testid="upload">
        <label>
          Name
          <input
            name="dataset_name"
            required
            maxLength={128}
            value={name}
            onInput={(e) => setName(e.currentTarget.value)}
          />
        </label>
        <label>
          Type
          <select name="dataset_type" value={type} onChange={(e) => setType(e.currentTarget.value)}>
            {TYPES.map((t) => (
              <option key={t}>{t}</option>
            ))}
          </select>
        </label>
        <label>
          File
          <input name="file" type="file" required onChange={(e) => setFile(e.currentTarget.files?.[0] ?? null)} />
        </label>
        <button class="primary" type="submit" disabled={act.busy || !file}>
          Upload
        </button>
      </form>
      {progress !== null && (
        <div class="row">
          <progress data-testid="upload-progress" max={1} value={progress} /> {state} {Math.round(progress * 100)}%
        </div>
      )}
      <ErrorBox error={act.error} />
    </Section>
  );
}

export function DatasetDetail({ name }: { name: string }) {
  const vs = useResource(() => api('GET', `/felix/datasets/${encodeURIComponent(name)}`), [name]);
  const [preview, setPreview] = useState<{ version: string; data: any } | null>(null);
  const act = useAction();
  const pending = (vs.data?.versions ?? []).some((v: any) => PENDING.includes(v.status));
  useInterval(() => void vs.reload(), 700, pending);
  const path = (v: any) => `/felix/datasets/${encodeURIComponent(name)}/${encodeURIComponent(v.version_number)}`;
  return (
    <>
      <p>
        <a href="#/datasets">← Datasets</a>
      </p>
      <h1>{name}</h1>
      <ErrorBox error={vs.error ?? act.error} />
      <Loading when={vs.loading && !vs.data} />
      {vs.data && (
        <Section
          title={`${vs.data.count} version(s)`}
          actions={
            <ConfirmButton
              label="Delete dataset"
              danger
              question="Delete every version?"
              onConfirm={() =>
                void act.run(async () => {
                  await api('DELETE', `/felix/datasets/${encodeURIComponent(name)}`);
                  location.hash = '#/datasets';
                })
              }
            />
          }
        >
          <table data-testid="versions-table">
            <thead>
              <tr>
                <th>Version</th>
                <th>Status</th>
                <th>Examples</th>
                <th>Type</th>
                <th>Source</th>
                <th>Created</th>
                <th>Problem</th>
                <th />
              </tr>
            </thead>
            <tbody>
              {vs.data.versions.map((v: any) => (
                <tr key={v.id} data-version={v.version_number}>
                  <td>{v.version_number}</td>
                  <td data-testid="version-status">
                    <Status value={v.status} />
                  </td>
                  <td>{v.size}</td>
                  <td>
                    {v.dataset_type} {v.format ?? ''}
                  </td>
                  <td>
                    {v.source}
                    {v.filename ? ` (${v.filename})` : ''}
                  </td>
                  <td>{fmtDate(v.created_at)}</td>
                  <td class="error-text">{v.processing_error ?? ''}</td>
                  <td>
                    {v.status === 'ready' && (
                      <span class="row">
                        <button
                          onClick={() =>
                            void act.run(async () =>
                              setPreview({
                                version: v.version_number,
                                data: await api('GET', `${path(v)}/preview`, { query: { limit: 20 } }),
                              }),
                            )
                          }
                        >
                          Preview
                        </button>
                        <a class="button" href={`${path(v)}/download`}>
                          Download
                        </a>
                      </span>
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </Section>
      )}
      {preview && (
        <Section title={`Preview of version ${preview.version} (${preview.data.count} of ${preview.data.total})`}>
          <table data-testid="preview-table">
            <tbody>
              {preview.data.records.map((r: any, i: number) => (
                <tr key={i}>
                  <td>
                    <code class="wrap">{JSON.stringify(r)}</code>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </Section>
      )}
    </>
  );
}

function Generate({ onStarted }: { onStarted: () => void }) {
  const [f, setF] = useState<Record<string, string>>({ task_type: 'ner', num_examples: '20' });
  const [job, setJob] = useState<any>(null);
  const act = useAction();
  const live = !!job && ['queued', 'generating'].includes(job.status);
  useInterval(() => void api('GET', `/generate/jobs/${job.job_id}`).then(setJob, () => {}), 1000, live);
  const set = (k: string, v: string) => setF({ ...f, [k]: v });
  const submit = (e: Event) => {
    e.preventDefault();
    void act.run(async () => {
      const body: Record<string, unknown> = {
        task_type: f.task_type,
        dataset_name: f.dataset_name,
        num_examples: Number(f.num_examples),
      };
      if (f.labels)
        body.labels = f.labels
          .split(',')
          .map((s) => s.trim())
          .filter(Boolean);
      if (f.domain_description) body.domain_description = f.domain_description;
      if (f.prompt) body.prompt = f.prompt;
      setJob(await api('POST', '/generate', { body }));
      onStarted();
    });
  };
  return (
    <Section title="Generate a synthetic dataset">
      <form class="grid-form" onSubmit={submit}>
        <label>
          Task
          <select value={f.task_type} onChange={(e) => set('task_type', e.currentTarget.value)}>
            {['ner', 'classification', 'decoder'].map((t) => (
              <option key={t}>{t}</option>
            ))}
          </select>
        </label>
        <label>
          Dataset name
          <input required value={f.dataset_name ?? ''} onInput={(e) => set('dataset_name', e.currentTarget.value)} />
        </label>
        <label>
          Examples
          <input
            type="number"
            min={1}
            max={1000}
            value={f.num_examples}
            onInput={(e) => set('num_examples', e.currentTarget.value)}
          />
        </label>
        <label>
          Labels (comma-separated)
          <input value={f.labels ?? ''} onInput={(e) => set('labels', e.currentTarget.value)} />
        </label>
        <label class="wide">
          Domain description
          <input value={f.domain_description ?? ''} onInput={(e) => set('domain_description', e.currentTarget.value)} />
        </label>
        {f.task_type === 'decoder' && (
          <label class="wide">
            Prompt
            <textarea rows={2} value={f.prompt ?? ''} onInput={(e) => set('prompt', e.currentTarget.value)} />
          </label>
        )}
        <div class="wide">
          <button class="primary" type="submit" disabled={act.busy}>
            Generate
          </button>
        </div>
      </form>
      {job && (
        <div class="notice">
          Generation job {job.job_id}: <Status value={job.status} /> {job.count ?? 0} example(s)
          {job.error ? ` — ${job.error}` : ''}
        </div>
      )}
      <ErrorBox error={act.error} />
    </Section>
  );
}

function LabelExisting() {
  const [kind, setKind] = useState('ner');
  const [labels, setLabels] = useState('');
  const [inputs, setInputs] = useState('');
  const [out, setOut] = useState<unknown>(null);
  const act = useAction();
  const submit = (e: Event) => {
    e.preventDefault();
    void act.run(async () =>
      setOut(
        await api('POST', `/generate/${kind}/label-existing`, {
          body: {
            labels: labels
              .split(',')
              .map((s) => s.trim())
              .filter(Boolean),
            inputs: inputs.split('\n').filter((s) => s.trim()),
          },
        }),
      ),
    );
  };
  return (
    <Section title="Label existing texts">
      <form class="grid-form" onSubmit={submit}>
        <label>
          Kind
          <select value={kind} onChange={(e) => setKind(e.currentTarget.value)}>
            <option value="ner">ner</option>
            <option value="classification">classification</option>
          </select>
        </label>
        <label>
          Labels (comma-separated)
          <input required value={labels} onInput={(e) => setLabels(e.currentTarget.value)} />
        </label>
        <label class="wide">
          Texts (one per line)
          <textarea rows={4} required value={inputs} onInput={(e) => setInputs(e.currentTarget.value)} />
        </label>
        <div class="wide">
          <button class="primary" type="submit" disabled={act.busy}>
            Label
          </button>
        </div>
      </form>
      <ErrorBox error={act.error} />
      {out !== null && <Json value={out} />}
    </Section>
  );
}
