// A project's adaptive retraining (GET /projects/:id/adaptive, PATCH /projects/:id {adaptive},
// POST /projects/:id/retrain): the policy form (the API checks every range: a 422 is shown as its
// message), the corrections waiting, "Retrain now", and the runs with their scores and decision.
import { useState } from 'preact/hooks';
import { api } from './api.ts';
import { ErrorBox, Section, Status, Table, fmtDate, fmtNum, useAction, useInterval, useResource } from './ui.tsx';

/** the policy's keys, in the README's order; `null` marks the nullable ones (blank = null) */
const FIELDS: Array<[key: string, label: string, nullable: boolean]> = [
  ['min_new_corrections', 'Min. new corrections', false],
  ['schedule_minutes', 'Schedule (minutes, blank: at once)', true],
  ['eval_dataset', 'Evaluation dataset (blank: none)', true],
  ['min_gain', 'Min. F1 gain', false],
  ['replay_fraction', 'Replay fraction', false],
  ['holdout_fraction', 'Holdout fraction', false],
  ['nr_epochs', 'Epochs (blank: as deployed)', true],
  ['learning_rate', 'Learning rate (blank: as deployed)', true],
];
const RUNNING = new Set(['preparing', 'training', 'evaluating']);

/** the form's text as the PATCH body: numbers stay numbers when they parse, so the API's range check speaks */
export function policyPatch(enabled: boolean, form: Record<string, string>) {
  const out: Record<string, unknown> = { enabled };
  for (const [k, , nullable] of FIELDS) {
    const v = (form[k] ?? '').trim();
    if (v === '') out[k] = nullable ? null : undefined;
    else if (k === 'eval_dataset') out[k] = v;
    else out[k] = Number.isFinite(Number(v)) ? Number(v) : v;
  }
  return out;
}

export function AdaptiveSection({ projectId, onChange }: { projectId: string; onChange: () => void }) {
  const st = useResource(() => api('GET', `/projects/${projectId}/adaptive`), [projectId]);
  const act = useAction();
  const [form, setForm] = useState<Record<string, string> | null>(null);
  const [enabled, setEnabled] = useState<boolean | null>(null);
  const [saved, setSaved] = useState<string | null>(null);
  const running = !!st.data?.runs.some((r: any) => RUNNING.has(r.status));
  useInterval(
    () => {
      void st.reload().then(onChange);
    },
    1000,
    running,
  );
  const pol = st.data?.policy;
  const f =
    form ?? (pol ? Object.fromEntries(FIELDS.map(([k]) => [k, pol[k] === null ? '' : String(pol[k])])) : {});
  const on = enabled ?? !!pol?.enabled;
  return (
    <Section
      title="Adaptive retraining"
      actions={
        <button
          data-testid="retrain"
          disabled={act.busy}
          onClick={() =>
            void act.run(async () => {
              await api('POST', `/projects/${projectId}/retrain`);
              await st.reload();
            })
          }
        >
          Retrain now
        </button>
      }
    >
      <div data-testid="adaptive">
      <ErrorBox error={act.error ?? st.error} />
      {st.data && (
        <>
          <p data-testid="new-corrections">
            {st.data.new_corrections} new correction{st.data.new_corrections === 1 ? '' : 's'} waiting.
          </p>
          <form
            class="grid-form"
            data-testid="adaptive-form"
            onSubmit={(e) => {
              e.preventDefault();
              setSaved(null);
              void act.run(async () => {
                const r = await api('PATCH', `/projects/${projectId}`, { body: { adaptive: policyPatch(on, f) } });
                st.setData({ ...st.data, policy: r.adaptive });
                setForm(null);
                setEnabled(null);
                setSaved(`Policy saved at ${new Date().toLocaleTimeString()}.`);
              });
            }}
          >
            <label class="check wide">
              <input
                type="checkbox"
                name="enabled"
                checked={on}
                onChange={(e) => setEnabled(e.currentTarget.checked)}
              />
              Retrain automatically when enough corrections are new
            </label>
            {FIELDS.map(([k, label]) => (
              <label key={k}>
                {label}
                <input name={k} value={f[k] ?? ''} onInput={(e) => setForm({ ...f, [k]: e.currentTarget.value })} />
              </label>
            ))}
            <div class="row wide">
              <button class="primary" type="submit" disabled={act.busy}>
                Save policy
              </button>
              {saved && (
                <span class="muted" data-testid="policy-saved">
                  {saved}
                </span>
              )}
            </div>
          </form>
          <h3>Runs</h3>
          <Table
            testid="adaptive-runs"
            head={[
              'Started',
              'Trigger',
              'Status',
              'Corrections (train / holdout)',
              'Training job',
              'New F1',
              'Deployed F1',
              'Gain',
              'Decision',
            ]}
            rows={st.data.runs}
            rowKey={(r: any) => r.id}
            cells={(r: any) => [
              fmtDate(r.created_at),
              r.trigger,
              <>
                <Status value={r.status} />
                {r.error ? <span class="error-text"> {r.error}</span> : null}
              </>,
              <>
                {r.train_corrections} / {r.holdout_corrections}
              </>,
              r.training_job_id ? <a href={`#/training/${r.training_job_id}`}>{r.training_job_id}</a> : '—',
              fmtNum(r.scores?.candidate),
              fmtNum(r.scores?.deployed),
              fmtNum(r.scores?.gain),
              <>
                {r.decision ?? '—'}
                {r.reason ? <div class="small muted">{r.reason}</div> : null}
              </>,
            ]}
            empty="No retraining yet."
          />
        </>
      )}
      </div>
    </Section>
  );
}
