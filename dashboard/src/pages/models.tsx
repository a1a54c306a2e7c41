// Models: the catalog (GET /base-models) with task type, pricing, caching family and whether the
// weights are on this server's disk; pulling one ahead of its first call (POST /models/pull) with
// its progress (GET /models/state); and the caller's trained models.
import { useState } from 'preact/hooks';
import { api } from '../api.ts';
import { ErrorBox, Loading, Section, Status, fmtDate, fmtNum, messageOf, useInterval, useResource } from '../ui.tsx';

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
          <table data-testid="models-table">
            <thead>
              <tr>
                <th>Id</th>
                <th>Task</th>
                <th>Pricing (credits / 1M tokens in · out)</th>
                <th>Caching</th>
                <th>Inference</th>
                <th>Training</th>
                <th>On this server</th>
              </tr>
            </thead>
            <tbody>
              {cat.data.models.map((m: any) => (
                <tr key={m.id}>
                  <td title={m.description}>{m.id}</td>
                  <td>{m.task_type}</td>
                  <td>{m.pricing ? `${m.pricing.input} · ${m.pricing.output}` : '—'}</td>
                  <td>{m.caching_family ?? '—'}</td>
                  <td>{m.supports_inference ? (m.supports_on_demand_inference ? 'on demand' : 'yes') : 'no'}</td>
                  <td>{m.supports_training ? 'yes' : 'no'}</td>
                  <td>
                    {m.supports_inference ? <PullCell id={m.id} /> : <span class="muted">training base only</span>}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
          <p class="muted small">
            A model that is not on disk is pulled and loaded when first called (the API answers 425 with Retry-After
            meanwhile), or ahead of time with Pull here (<code>POST /models/pull</code>) or{' '}
            <code>loom pull &lt;org/name&gt;</code>.
          </p>
        </Section>
      )}
      {trained.data && (
        <Section title="Trained models">
          <table>
            <thead>
              <tr>
                <th>Name</th>
                <th>Id (model_id)</th>
                <th>Base</th>
                <th>Status</th>
                <th>F1</th>
                <th>Completed</th>
              </tr>
            </thead>
            <tbody>
              {trained.data.models.map((m: any) => (
                <tr key={m.id}>
                  <td>
                    <a href={`#/training/${m.id}`}>{m.model_name}</a>
                  </td>
                  <td>
                    <code>{m.id}</code>
                  </td>
                  <td>{m.base_model}</td>
                  <td>
                    <Status value={m.status} />
                  </td>
                  <td>{fmtNum(m.metrics?.f1, 3)}</td>
                  <td>{fmtDate(m.completed_at)}</td>
                </tr>
              ))}
              {!trained.data.models.length && (
                <tr>
                  <td colSpan={6} class="muted">
                    None yet.
                  </td>
                </tr>
              )}
            </tbody>
          </table>
        </Section>
      )}
    </>
  );
}
