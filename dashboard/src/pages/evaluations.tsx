// Evaluations: start one (a model on a ready dataset), the list, and per-label precision / recall /
// F1 of a completed one beside a baseline evaluation on the same dataset when there is one.
import { useState } from 'preact/hooks';
import { api } from '../api.ts';
import {
  ConfirmButton,
  ErrorBox,
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

export function EvaluationsPage() {
  const list = useResource(() => api('GET', '/felix/evaluations'));
  const baselines = useResource(() => api('GET', '/felix/baseline-models'));
  const datasets = useResource(() => api('GET', '/felix/datasets'));
  const [model, setModel] = useState('');
  const [dataset, setDataset] = useState('');
  const [open, setOpen] = useState<string | null>(null);
  const act = useAction();
  const evals: any[] = list.data?.evaluations ?? [];
  useInterval(
    () => void list.reload(),
    1500,
    evals.some((e) => e.status === 'queued' || e.status === 'running'),
  );
  const start = (e: Event) => {
    e.preventDefault();
    void act.run(async () => {
      await api('POST', '/felix/evaluations', { body: { base_model: model, dataset_name: dataset } });
      await list.reload();
    });
  };
  const baselineIds = new Set((baselines.data?.models ?? []).map((m: any) => m.id));
  return (
    <>
      <h1>Evaluations</h1>
      <Section title="Start an evaluation">
        <form class="row" onSubmit={start}>
          <label>
            Model (training job id or baseline)
            <input list="eval-models" required value={model} onInput={(e) => setModel(e.currentTarget.value)} />
            <datalist id="eval-models">
              {(baselines.data?.models ?? []).map((m: any) => (
                <option key={m.id} value={m.id}>
                  {m.name}
                </option>
              ))}
            </datalist>
          </label>
          <label>
            Dataset
            <select required value={dataset} onChange={(e) => setDataset(e.currentTarget.value)}>
              <option value="">choose…</option>
              {(datasets.data?.datasets ?? [])
                .filter((d: any) => d.status === 'ready')
                .map((d: any) => (
                  <option key={d.dataset_name}>{d.dataset_name}</option>
                ))}
            </select>
          </label>
          <button class="primary" type="submit" disabled={act.busy}>
            Evaluate
          </button>
        </form>
        <ErrorBox error={act.error ?? list.error} />
      </Section>
      <Loading when={list.loading && !list.data} />
      <Section title="Evaluations">
        <Table
          head={['Model', 'Dataset', 'Status', 'F1', 'Precision', 'Recall', 'Examples', 'Completed', '']}
          rows={evals}
          rowKey={(e) => e.id}
          cells={(e) => [
            <a
              href="#/evaluations"
              onClick={(ev) => {
                ev.preventDefault();
                setOpen(open === e.id ? null : e.id);
              }}
            >
              {e.base_model}
            </a>,
            <>
              {e.dataset_name} v{e.dataset_version}
            </>,
            <>
              <Status value={e.status} />
              {e.error ? ` ${e.error}` : ''}
            </>,
            fmtNum(e.f1_score, 3),
            fmtNum(e.precision_score, 3),
            fmtNum(e.recall_score, 3),
            e.sample_count ?? '—',
            fmtDate(e.completed_at),
            <ConfirmButton
              label="Delete"
              question="Delete?"
              onConfirm={() =>
                void act.run(async () => {
                  await api('DELETE', `/felix/evaluations/${e.id}`);
                  await list.reload();
                })
              }
            />,
          ]}
          empty="No evaluations yet."
        />
      </Section>
      {open && (
        <PerLabel
          ev={evals.find((e) => e.id === open)}
          baseline={evals.find((b) => {
            const e = evals.find((x) => x.id === open);
            return (
              b.id !== open &&
              e &&
              b.dataset_name === e.dataset_name &&
              baselineIds.has(b.base_model) &&
              b.status === 'complete'
            );
          })}
        />
      )}
    </>
  );
}

function PerLabel({ ev, baseline }: { ev: any; baseline?: any }) {
  if (!ev?.per_label)
    return (
      <Section title="Per label">
        <div class="muted">No per-label results (yet).</div>
      </Section>
    );
  const labels = Object.keys(ev.per_label);
  return (
    <Section title={`Per label: ${ev.base_model}${baseline ? ` vs baseline ${baseline.base_model}` : ''}`}>
      <table data-testid="per-label">
        <thead>
          <tr>
            <th>Label</th>
            <th>Precision</th>
            <th>Recall</th>
            <th>F1</th>
            {baseline && (
              <>
                <th>Baseline F1</th>
                <th>Δ F1</th>
              </>
            )}
          </tr>
        </thead>
        <tbody>
          {labels.map((l) => {
            const m = ev.per_label[l];
            const b = baseline?.per_label?.[l];
            return (
              <tr key={l}>
                <td>{l}</td>
                <td>{fmtNum(m.precision, 3)}</td>
                <td>{fmtNum(m.recall, 3)}</td>
                <td>{fmtNum(m.f1, 3)}</td>
                {baseline && (
                  <>
                    <td>{fmtNum(b?.f1, 3)}</td>
                    <td>{b ? fmtNum(m.f1 - b.f1, 3) : '—'}</td>
                  </>
                )}
              </tr>
            );
          })}
        </tbody>
      </table>
    </Section>
  );
}
