// Training jobs: create (base model, datasets, algorithm and the documented options), list, and a
// job's detail: live logs from the SSE stream (GET …/logs?stream=true), loss / validation-loss and
// reward curves drawn from the metrics in those log lines, checkpoints, stop, delete, download, deploy.
import { useEffect, useState } from 'preact/hooks';
import { api, authHeaders, sse } from '../api.ts';
import { RL_CONFIG_RULES, type RlAlgorithm } from '../../../src/training/algorithms/rl-config.ts';
import { LineChart } from '../chart.tsx';
import { curves, metricsOf, type MetricPoint } from '../metrics.ts';
import {
  ConfirmButton,
  ErrorBox,
  Json,
  Loading,
  Section,
  Status,
  Table,
  fmtDate,
  fmtNum,
  useAction,
  useInterval,
  useResource,
} from '../ui.tsx';

const LIVE = ['requested', 'running'];
export const ALGORITHMS = ['sft', 'dpo', 'grpo'];

export function TrainingPage() {
  const jobs = useResource(() => api('GET', '/felix/training-jobs', { query: { limit: 200 } }));
  const live = (jobs.data?.training_jobs ?? []).some((j: any) => LIVE.includes(j.status));
  useInterval(() => void jobs.reload(), 2000, live);
  return (
    <>
      <h1>Training jobs</h1>
      <CreateJob
        onCreated={(id) => {
          location.hash = `#/training/${id}`;
        }}
      />
      <Section title="Jobs">
        <ErrorBox error={jobs.error} />
        <Loading when={jobs.loading && !jobs.data} />
        {jobs.data && (
          <Table
            testid="jobs-table"
            head={['Name', 'Base model', 'Algorithm', 'Status', 'Progress', 'Loss', 'F1', 'Created']}
            rows={jobs.data.training_jobs}
            rowKey={(j: any) => j.id}
            cells={(j: any) => [
              <a href={`#/training/${j.id}`}>{j.model_name}</a>,
              j.base_model,
              `${j.training_type} ${j.training_algorithm}`,
              <Status value={j.status} />,
              `${fmtNum(j.progress_percent, 0)}%`,
              fmtNum(j.train_loss),
              fmtNum(j.metrics?.f1, 3),
              fmtDate(j.created_at),
            ]}
            empty="No training jobs yet."
          />
        )}
      </Section>
    </>
  );
}

const NUMERIC: Array<[string, string, string]> = [
  ['nr_epochs', 'Epochs', '1'],
  ['learning_rate', 'Learning rate', 'any'],
  ['batch_size', 'Batch size', '1'],
  ['eval_steps', 'Evaluate every (steps)', '1'],
  ['validation_data_percentage', 'Validation %', 'any'],
  ['max_steps', 'Max steps', '1'],
  ['lora_r', 'LoRA r', '1'],
  ['lora_alpha', 'LoRA alpha', 'any'],
  ['seed', 'Seed', '1'],
];

type RlRule = (typeof RL_CONFIG_RULES)[keyof typeof RL_CONFIG_RULES];

/** the rl_config keys of an algorithm, in the rules' order (src/training/algorithms/rl-config.ts) */
export const rlKeys = (algo: RlAlgorithm) =>
  (Object.entries(RL_CONFIG_RULES) as Array<[string, RlRule]>).filter(([, r]) => !r.algos || r.algos.includes(algo));

/** a rule's range as a label suffix: [min, max] or (min, max] */
function rangeOf(r: RlRule): string {
  if (r.kind !== 'int' && r.kind !== 'num') return '';
  return `${r.kind === 'num' && r.exclusiveMin ? '(' : '['}${r.min}, ${r.max}]`;
}

/** the form's fields as rl_config: blank → left out (the server's default); numbers sent as numbers when they
 * parse (else as typed, so the API's 422 names the key) */
export function rlConfigBody(algo: RlAlgorithm, form: Record<string, string>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, rule] of rlKeys(algo)) {
    const v = (form[k] ?? '').trim();
    if (v === '') continue;
    out[k] = (rule.kind === 'int' || rule.kind === 'num') && Number.isFinite(Number(v)) ? Number(v) : v;
  }
  return out;
}

function CreateJob({ onCreated }: { onCreated: (id: string) => void }) {
  const models = useResource(() => api('GET', '/base-models'));
  const datasets = useResource(() => api('GET', '/felix/datasets'));
  const [f, setF] = useState<Record<string, string>>({
    training_type: '',
    training_algorithm: 'sft',
  });
  const [rlf, setRlf] = useState<Record<string, string>>({});
  const [chosen, setChosen] = useState<string[]>([]);
  const act = useAction();
  const set = (k: string, v: string) => setF({ ...f, [k]: v });
  const ready = (datasets.data?.datasets ?? []).filter((d: any) => d.status === 'ready');
  const rl = f.training_algorithm !== 'sft';

  const submit = (e: Event) => {
    e.preventDefault();
    void act.run(async () => {
      const body: Record<string, unknown> = {
        base_model: f.base_model,
        datasets: chosen.map((name) => ({ name })),
        training_algorithm: f.training_algorithm,
      };
      if (f.training_type) body.training_type = f.training_type; // else the server's: lora, full for fresh encoders
      if (f.model_name) body.model_name = f.model_name;
      if (f.project_id) body.project_id = f.project_id;
      for (const [k] of NUMERIC) if (f[k]) body[k] = Number(f[k]);
      if (f.early_stopping) body.early_stopping = f.early_stopping === 'true';
      if (rl) body.rl_config = rlConfigBody(f.training_algorithm as RlAlgorithm, rlf);
      const r = await api('POST', '/felix/training-jobs', { body });
      onCreated(r.id);
    });
  };
  return (
    <Section title="New training job">
      <ErrorBox error={models.error ?? datasets.error} />
      <form class="grid-form" onSubmit={submit} data-testid="new-job">
        <label>
          Base model
          <input
            name="base_model"
            list="base-models"
            required
            value={f.base_model ?? ''}
            placeholder="catalog id or checkpoint id"
            onInput={(e) => set('base_model', e.currentTarget.value)}
          />
          <datalist id="base-models">
            {(models.data?.models ?? [])
              .filter((m: any) => m.supports_training !== false)
              .map((m: any) => (
                <option key={m.id} value={m.id}>
                  {m.name}
                </option>
              ))}
          </datalist>
        </label>
        <label>
          Model name
          <input
            name="model_name"
            value={f.model_name ?? ''}
            onInput={(e) => set('model_name', e.currentTarget.value)}
          />
        </label>
        <fieldset>
          <legend>Datasets (ready)</legend>
          {ready.map((d: any) => (
            <label key={d.dataset_name} class="check">
              <input
                type="checkbox"
                name="dataset"
                value={d.dataset_name}
                checked={chosen.includes(d.dataset_name)}
                onChange={(e) =>
                  setChosen(
                    e.currentTarget.checked ? [...chosen, d.dataset_name] : chosen.filter((x) => x !== d.dataset_name),
                  )
                }
              />
              {d.dataset_name}
            </label>
          ))}
          {!ready.length && <span class="muted">No ready dataset: upload one first.</span>}
        </fieldset>
        <label>
          Training type
          <select
            name="training_type"
            value={f.training_type}
            onChange={(e) => set('training_type', e.currentTarget.value)}
          >
            <option value="">default (lora; full for a fresh encoder)</option>
            <option value="lora">lora</option>
            <option value="full">full (encoders)</option>
          </select>
        </label>
        <label>
          Algorithm
          <select
            name="training_algorithm"
            value={f.training_algorithm}
            onChange={(e) => set('training_algorithm', e.currentTarget.value)}
          >
            {ALGORITHMS.map((a) => (
              <option key={a} value={a}>
                {a}
              </option>
            ))}
          </select>
        </label>
        {NUMERIC.map(([k, label, step]) => (
          <label key={k}>
            {label}
            <input
              name={k}
              type="number"
              step={step}
              value={f[k] ?? ''}
              onInput={(e) => set(k, e.currentTarget.value)}
            />
          </label>
        ))}
        <label>
          Early stopping
          <select
            name="early_stopping"
            value={f.early_stopping ?? ''}
            onChange={(e) => set('early_stopping', e.currentTarget.value)}
          >
            <option value="">default</option>
            <option value="true">on</option>
            <option value="false">off</option>
          </select>
        </label>
        <label>
          Project id (optional)
          <input
            name="project_id"
            value={f.project_id ?? ''}
            onInput={(e) => set('project_id', e.currentTarget.value)}
          />
        </label>
        {rl && (
          <fieldset class="wide" data-testid="rl-config">
            <legend>rl_config ({f.training_algorithm}; blank fields take the default shown)</legend>
            {rlKeys(f.training_algorithm as RlAlgorithm).map(([k, rule]) => (
              <label key={k}>
                {k} {rangeOf(rule)}
                {rule.kind === 'enum' ? (
                  <select
                    name={`rl_${k}`}
                    value={rlf[k] ?? ''}
                    onChange={(e) => setRlf({ ...rlf, [k]: e.currentTarget.value })}
                  >
                    <option value="">{rule.def === null ? 'choose…' : `default: ${rule.def}`}</option>
                    {rule.values.map((v) => (
                      <option key={v} value={v}>
                        {v}
                      </option>
                    ))}
                  </select>
                ) : (
                  <input
                    name={`rl_${k}`}
                    value={rlf[k] ?? ''}
                    placeholder={rule.def === null ? 'required for llm_as_judge' : `default ${rule.def}`}
                    onInput={(e) => setRlf({ ...rlf, [k]: e.currentTarget.value })}
                  />
                )}
              </label>
            ))}
          </fieldset>
        )}
        <div class="wide">
          <button class="primary" type="submit" disabled={act.busy || !chosen.length}>
            Start training
          </button>
        </div>
      </form>
      <ErrorBox error={act.error} />
    </Section>
  );
}

interface LogLine {
  seq: number;
  timestamp: string;
  level: string;
  message: string;
}
/** follows the job's logs over SSE (resuming after the last seq on reconnect) until the `end` event */
function useLogs(id: string) {
  const [logs, setLogs] = useState<LogLine[]>([]);
  const [ended, setEnded] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    const ctl = new AbortController();
    let after = -1;
    setLogs([]);
    setEnded(null);
    (async () => {
      for (let attempt = 0; !ctl.signal.aborted && attempt < 20; attempt++) {
        try {
          const r = await fetch(`/felix/training-jobs/${id}/logs?stream=true&after=${after}`, {
            credentials: 'same-origin',
            headers: authHeaders('GET'),
            signal: ctl.signal,
          });
          if (!r.ok) {
            setError((await r.json().catch(() => null))?.detail ?? `HTTP ${r.status}`);
            return;
          }
          for await (const ev of sse(r, ctl.signal)) {
            if (ev.event === 'log') {
              const l = JSON.parse(ev.data) as LogLine;
              after = l.seq;
              setLogs((prev) => [...prev, l]);
            } else if (ev.event === 'end') {
              setEnded(JSON.parse(ev.data).status);
              return;
            }
          }
        } catch (e) {
          if (ctl.signal.aborted) return;
          setError(`Log stream interrupted (${(e as Error).message}); reconnecting`);
        }
        await new Promise((res) => setTimeout(res, 1000));
      }
    })();
    return () => ctl.abort();
  }, [id]);
  return { logs, ended, error };
}

export function TrainingDetail({ id }: { id: string }) {
  const job = useResource(() => api('GET', `/felix/training-jobs/${id}`), [id]);
  const cks = useResource(() => api('GET', `/felix/training-jobs/${id}/checkpoints`), [id]);
  const projects = useResource(() => api('GET', '/projects'));
  const { logs, ended, error } = useLogs(id);
  const act = useAction();
  const [download, setDownload] = useState<any>(null);
  const [project, setProject] = useState('');
  const [deployed, setDeployed] = useState<any>(null);
  const j = job.data;
  const live = !!j && LIVE.includes(j.status) && !ended;
  useInterval(
    () => {
      void job.reload();
      void cks.reload();
    },
    1500,
    live,
  );
  useEffect(() => {
    if (ended) {
      void job.reload();
      void cks.reload();
    }
  }, [ended]);

  const points = logs.map((l) => metricsOf(l.message)).filter((p): p is MetricPoint => p !== null);
  const loss = curves(points, (n) => n.includes('loss'));
  const reward = curves(points, (n) => n.includes('reward'));

  return (
    <>
      <p>
        <a href="#/training">← Training jobs</a>
      </p>
      <ErrorBox error={job.error} />
      <Loading when={job.loading && !j} />
      {j && (
        <>
          <Section title={j.model_name} actions={<Status value={j.status} />}>
            <dl class="kv">
              <dt>Id</dt>
              <dd>
                <code>{j.id}</code>
              </dd>
              <dt>Base model</dt>
              <dd>{j.base_model}</dd>
              <dt>Type</dt>
              <dd>
                {j.task_type} · {j.training_type} · {j.training_algorithm}
              </dd>
              <dt>Datasets</dt>
              <dd>{j.datasets.map((d: any) => `${d.name} v${d.version} (${d.size})`).join(', ')}</dd>
              <dt>Progress</dt>
              <dd>
                <progress max={100} value={j.progress_percent} /> {fmtNum(j.progress_percent, 1)}% · epoch{' '}
                {j.current_epoch} · step {j.current_step}/{j.total_steps ?? '?'}
              </dd>
              <dt>Loss</dt>
              <dd>
                train {fmtNum(j.train_loss)} · validation {fmtNum(j.val_loss)} · {fmtNum(j.tokens_per_s, 0)} tokens/s
              </dd>
              {j.metrics && (
                <>
                  <dt>Metrics</dt>
                  <dd data-testid="job-metrics">
                    F1 {fmtNum(j.metrics.f1, 3)} · precision {fmtNum(j.metrics.precision, 3)} · recall{' '}
                    {fmtNum(j.metrics.recall, 3)}
                  </dd>
                </>
              )}
              {j.error && (
                <>
                  <dt>Error</dt>
                  <dd class="error">{j.error}</dd>
                </>
              )}
              <dt>Created</dt>
              <dd>{fmtDate(j.created_at)}</dd>
              <dt>Completed</dt>
              <dd>{fmtDate(j.completed_at)}</dd>
            </dl>
            <div class="row">
              {j.status === 'running' && (
                <ConfirmButton
                  label="Stop"
                  question="Stop this job?"
                  testid="stop-job"
                  onConfirm={() =>
                    void act.run(async () => {
                      await api('POST', `/felix/training-jobs/${id}/stop`);
                      await job.reload();
                    })
                  }
                />
              )}
              {(j.status === 'complete' || j.status === 'deployed') && (
                <button
                  onClick={() =>
                    void act.run(async () => setDownload(await api('GET', `/felix/training-jobs/${id}/download`)))
                  }
                >
                  Prepare download
                </button>
              )}
              {download && (
                <a class="button" href={download.download_url} download={download.filename}>
                  Download {download.filename} ({Math.round(download.size_bytes / 1024)} KB)
                </a>
              )}
              <ConfirmButton
                label="Delete"
                danger
                question="Delete the job, its checkpoints, logs and weights?"
                onConfirm={() =>
                  void act.run(async () => {
                    await api('DELETE', `/felix/training-jobs/${id}`);
                    location.hash = '#/training';
                  })
                }
              />
            </div>
            {(j.status === 'complete' || j.status === 'deployed') && (
              <div class="row">
                <label>
                  Deploy to project
                  <select value={project} onChange={(e) => setProject(e.currentTarget.value)}>
                    <option value="">choose…</option>
                    {(projects.data?.projects ?? []).map((p: any) => (
                      <option key={p.id} value={p.id}>
                        {p.name}
                      </option>
                    ))}
                  </select>
                </label>
                <button
                  disabled={!project}
                  onClick={() =>
                    void act.run(async () =>
                      setDeployed(
                        await api('POST', `/projects/${project}/deployments`, { body: { training_job_id: id } }),
                      ),
                    )
                  }
                >
                  Deploy
                </button>
                {deployed && (
                  <span>
                    Deployment {deployed.deployment_id}: <Status value={deployed.status} />
                  </span>
                )}
              </div>
            )}
            <ErrorBox error={act.error} />
          </Section>
          <Section title="Loss">
            {loss.x.length ? (
              <LineChart testid="loss-chart" x={loss.x} series={loss.series} xLabel="step" />
            ) : (
              <div class="muted" data-testid="loss-chart-empty">
                No loss reported yet.
              </div>
            )}
          </Section>
          {reward.x.length > 0 && (
            <Section title="Reward">
              <LineChart testid="reward-chart" x={reward.x} series={reward.series} xLabel="step" />
            </Section>
          )}
          <Section title="Checkpoints">
            <ErrorBox error={cks.error} />
            {cks.data && (
              <Table
                head={['Id (usable as base_model)', 'Epoch', 'Step', 'Train loss', 'Val loss', '']}
                rows={cks.data.checkpoints}
                rowKey={(c: any) => c.id}
                cells={(c: any) => [
                  <code>{c.id}</code>,
                  c.epoch,
                  c.step,
                  fmtNum(c.train_loss),
                  fmtNum(c.val_loss),
                  `${c.is_best ? 'best ' : ''}${c.is_final ? 'final' : ''}`,
                ]}
              />
            )}
          </Section>
          <Section title={`Logs${live ? ' (live)' : ''}`}>
            <ErrorBox error={error} />
            <pre class="logs" data-testid="logs">
              {logs.map((l) => `${l.timestamp.slice(11, 19)} ${l.level.padEnd(5)} ${l.message}\n`).join('')}
            </pre>
          </Section>
          <details>
            <summary>Configuration</summary>
            <Json value={j.configuration} />
          </details>
        </>
      )}
    </>
  );
}
