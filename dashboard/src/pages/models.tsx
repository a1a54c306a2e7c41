// Models: the catalog (GET /base-models) with task type, pricing, caching family and whether the
// weights are on this server's disk; pulling one ahead of its first call (POST /models/pull) with
// its progress (GET /models/state); and the caller's trained models.
import { useState } from 'preact/hooks';
import { api } from '../api.ts';
import {
  ErrorBox,
  Loading,
  Section,
  Status,
  Table,
  fmtDate,
  fmtNum,
  messageOf,
  useInterval,
  useResource,
} from '../ui.tsx';

/** the model's state on this server, with a Pull button while it is pullable and progress while it warms */
function PullCell({ id }: { id: string }) {
  const st = useResource(() => api('GET', '/models/state', { query: { model_id: id } }), [id]);
  const [error, setError] = useState<string | null>(null);
  const s = st.data;
  useInterval(() => void st.reload(), 1000, s?.state === 'warming');
  const pull = async () => {
    setError(null);
    try {
      st.setData(await api('POST', '/models/pull', { body: { model_id: id } }));
    } catch (e) {
      setError(messageOf(e));
    }
  };
  return (
    <span class="inline" data-testid="model-state" data-model={id}>
      {s && <Status value={s.state} />}
      {s?.state === 'warming' &&
        (s.progress !== undefined ? (
          <>
            <progress max={1} value={s.progress} /> {Math.round(s.progress * 100)}%
          </>
        ) : (
          <progress />
        ))}
      {s?.state === 'pullable' && <button onClick={() => void pull()}>Pull</button>}
      {s?.state === 'unavailable' && <span class="error-text">{s.reason}</span>}
      {(error ?? st.error) && <span class="error-text">{error ?? st.error}</span>}
    </span>
  );
}

export function ModelsPage() {
  const cat = useResource(() => api('GET', '/base-models'));
  const trained = useResource(() => api('GET', '/felix/trained-models'));
  return (
    <>
      <h1>Models</h1>
      <ErrorBox error={cat.error ?? trained.error} />
      <Loading when={cat.loading && !cat.data} />
      {cat.data && (
        <Section title={`Catalog (${cat.data.count})`}>
          <Table
            testid="models-table"
            head={[
    'Id',
    'Task',
    'Pricing (credits / 1M tokens in · out)',
    'Caching',
    'Inference',
    'Training',
    'On this server',
  ]}
            rows={cat.data.models}
            rowKey={(m: any) => m.id}
            cells={(m: any) => [
              <span title={m.description}>{m.id}</span>,
              m.task_type,
              m.pricing ? `${m.pricing.input} · ${m.pricing.output}` : '—',
              m.caching_family ?? '—',
              m.supports_inference ? (m.supports_on_demand_inference ? 'on demand' : 'yes') : 'no',
              m.supports_training ? 'yes' : 'no',
              m.supports_inference ? <PullCell id={m.id} /> : <span class="muted">training base only</span>,
            ]}
          />
          <p class="muted small">
            A model that is not on disk is pulled and loaded when first called (the API answers 425 with Retry-After
            meanwhile), or ahead of time with Pull here (<code>POST /models/pull</code>) or{' '}
            <code>loom pull &lt;org/name&gt;</code>.
          </p>
        </Section>
      )}
      {trained.data && (
        <Section title="Trained models">
          <Table
            head={['Name', 'Id (model_id)', 'Base', 'Status', 'F1', 'Completed']}
            rows={trained.data.models}
            rowKey={(m: any) => m.id}
            cells={(m: any) => [
              <a href={`#/training/${m.id}`}>{m.model_name}</a>,
              <code>{m.id}</code>,
              m.base_model,
              <Status value={m.status} />,
              fmtNum(m.metrics?.f1, 3),
              fmtDate(m.completed_at),
            ]}
            empty="None yet."
          />
        </Section>
      )}
    </>
  );
}
