// Inferences: the history with every filter of GET /inferences, one record's detail and its review
// (correct / incorrect, span edits for entity outputs, notes) through POST /inferences/:id/feedback,
// the judge's verdict (and a "Judge" button asking the configured LLM judge now), the judge-verdict
// filter, and a keyboard-driven review queue.
import { useEffect, useLayoutEffect, useRef, useState } from 'preact/hooks';
import { api } from '../api.ts';
import {
  ErrorBox,
  Json,
  Loading,
  Section,
  Status,
  fmtDate,
  fmtMoney,
  fmtNum,
  messageOf,
  useAction,
  useResource,
} from '../ui.tsx';
import { SpanText, entitiesOutput, spansOf, type Span } from '../spans.tsx';

const FILTERS: Array<[string, string, 'text' | 'number' | 'datetime-local' | 'verdict']> = [
  ['model_id', 'Model', 'text'],
  ['task', 'Task', 'text'],
  ['project_id', 'Project', 'text'],
  ['training_job_id', 'Training job', 'text'],
  ['latency_min', 'Latency ≥ ms', 'number'],
  ['latency_max', 'Latency ≤ ms', 'number'],
  ['llmaj_score_min', 'Judge score ≥', 'number'],
  ['llmaj_score_max', 'Judge score ≤', 'number'],
  ['llmaj_verdict', 'Judge verdict', 'verdict'],
  ['since', 'Since', 'datetime-local'],
  ['until', 'Until', 'datetime-local'],
];
const PAGE = 25;

/** the input text of a record (encoder `text`, or the last user message of a decoder call) */
export function inputText(r: any): string {
  const i = r?.input;
  if (typeof i?.text === 'string') return i.text;
  if (Array.isArray(i?.text)) return i.text.join('\n');
  const msgs = i?.messages;
  if (Array.isArray(msgs) && msgs.length) {
    const c = msgs[msgs.length - 1].content;
    return typeof c === 'string' ? c : Array.isArray(c) ? c.map((b: any) => b.text ?? '').join('') : '';
  }
  if (typeof i?.prompt === 'string') return i.prompt;
  return i ? JSON.stringify(i) : '';
}

function query(f: Record<string, string>, offset: number) {
  const q: Record<string, unknown> = { limit: PAGE, offset };
  for (const [k, , type] of FILTERS) {
    const v = f[k];
    if (!v) continue;
    q[k] = type === 'datetime-local' ? new Date(v).toISOString() : v;
  }
  return q;
}

export function InferencesPage() {
  const [draft, setDraft] = useState<Record<string, string>>({});
  const [filters, setFilters] = useState<Record<string, string>>({});
  const [offset, setOffset] = useState(0);
  const list = useResource(() => api('GET', '/inferences', { query: query(filters, offset) }), [filters, offset]);
  return (
    <>
      <h1>Inferences</h1>
      <Section title="Filters">
        <form
          class="filters"
          onSubmit={(e) => {
            e.preventDefault();
            setOffset(0);
            setFilters({ ...draft });
          }}
        >
          {FILTERS.map(([k, label, type]) => (
            <label key={k}>
              {label}
              {type === 'verdict' ? (
                <select
                  name={k}
                  value={draft[k] ?? ''}
                  onChange={(e) => setDraft({ ...draft, [k]: e.currentTarget.value })}
                >
                  <option value="">any</option>
                  <option value="pass">pass</option>
                  <option value="fail">fail</option>
                  <option value="uncertain">uncertain</option>
                  <option value="none">not judged</option>
                </select>
              ) : (
                <input
                  name={k}
                  type={type as 'text'}
                  step={type === 'number' ? 'any' : undefined}
                  value={draft[k] ?? ''}
                  onInput={(e) => setDraft({ ...draft, [k]: e.currentTarget.value })}
                />
              )}
            </label>
          ))}
          <div class="row">
            <button class="primary" type="submit">
              Apply
            </button>
            <button
              type="button"
              onClick={() => {
                setDraft({});
                setFilters({});
                setOffset(0);
              }}
            >
              Clear
            </button>
          </div>
        </form>
      </Section>
      <ErrorBox error={list.error} />
      <Loading when={list.loading && !list.data} />
      {list.data && (
        <Section title={`${list.data.total} inference(s)`}>
          <InferenceTable rows={list.data.inferences} />
          <div class="row">
            <button disabled={offset === 0} onClick={() => setOffset(Math.max(0, offset - PAGE))}>
              Previous
            </button>
            <span class="muted">
              {offset + 1}–{offset + list.data.count} of {list.data.total}
            </span>
            <button disabled={offset + list.data.count >= list.data.total} onClick={() => setOffset(offset + PAGE)}>
              Next
            </button>
          </div>
        </Section>
      )}
    </>
  );
}

function InferenceTable({ rows }: { rows: any[] }) {
  if (!rows.length) return <div class="muted">No inferences match.</div>;
  return (
    <table data-testid="inferences-table">
      <thead>
        <tr>
          <th>When</th>
          <th>Model</th>
          <th>Task</th>
          <th>Input</th>
          <th>Latency</th>
          <th>Cost</th>
          <th>Judge</th>
          <th>Status</th>
        </tr>
      </thead>
      <tbody>
        {rows.map((r) => (
          <tr key={r.id}>
            <td>
              <a href={`#/inferences/${r.id}`}>{fmtDate(r.created_at)}</a>
            </td>
            <td>{r.model_id}</td>
            <td>{r.task}</td>
            <td class="clip" data-testid="inference-input">
              {inputText(r)}
            </td>
            <td>{fmtNum(r.latency_ms, 1)} ms</td>
            <td>{fmtMoney(r.cost)}</td>
            <td>{r.llmaj_score ?? '—'}</td>
            <td>
              <Status value={r.status} />
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

/** labels of the record's schema (entity names), plus those already in the output */
function labelsOf(r: any): string[] {
  const s = r.schema;
  const names: string[] = Array.isArray(s)
    ? s.map((x: any) => (typeof x === 'string' ? x : x?.name))
    : Array.isArray(s?.entities)
      ? s.entities.map((x: any) => (typeof x === 'string' ? x : x?.name))
      : s?.entities && typeof s.entities === 'object'
        ? Object.keys(s.entities)
        : [];
  const out = r.output?.entities;
  if (out && !Array.isArray(out) && typeof out === 'object') names.push(...Object.keys(out));
  return [...new Set(names.filter(Boolean))];
}

export function InferenceDetail({ id }: { id: string }) {
  const rec = useResource(() => api('GET', `/inferences/${id}`), [id]);
  return (
    <>
      <p>
        <a href="#/inferences">← Inferences</a>
      </p>
      <ErrorBox error={rec.error} />
      <Loading when={rec.loading && !rec.data} />
      {rec.data && <Review rec={rec.data} />}
    </>
  );
}

/** one record and its review; `onDone` after a verdict is stored (the queue moves on) */
function Review({ rec, onDone, keyboard }: { rec: any; onDone?: () => void; keyboard?: boolean }) {
  const text = inputText(rec);
  const isEntities =
    rec.type === 'encoder' &&
    rec.output &&
    typeof rec.output === 'object' &&
    'entities' in rec.output &&
    typeof rec.input?.text === 'string';
  const labels = labelsOf(rec);
  const original = isEntities ? spansOf(rec.output, text) : [];
  const [spans, setSpans] = useState<Span[]>(original);
  const [edited, setEdited] = useState(false);
  const [outputText, setOutputText] = useState(JSON.stringify(rec.output, null, 2));
  const [notes, setNotes] = useState('');
  const [feedback, setFeedback] = useState<any>(null);
  // the judgement of the "Judge" button (POST /inferences/:id/judge) over the record's own llmaj_* fields
  const [judgement, setJudgement] = useState<any>(null);
  const judging = useAction();
  const j = { ...rec, ...(judgement ?? {}) };
  const act = useAction();
  const notesRef = useRef<HTMLTextAreaElement>(null);

  useEffect(() => {
    setSpans(original);
    setEdited(false);
    setNotes('');
    setFeedback(null);
    setJudgement(null);
    setOutputText(JSON.stringify(rec.output, null, 2));
    api('GET', `/inferences/${rec.id}/feedback`)
      .then((f) => {
        setFeedback(f);
        setNotes(f.notes ?? '');
      })
      .catch(() => {});
  }, [rec.id]);

  const submit = (verdict: 'correct' | 'incorrect') =>
    act.run(async () => {
      const body: Record<string, unknown> = { verdict };
      if (notes) body.notes = notes;
      if (verdict === 'incorrect') {
        if (isEntities) body.corrected_output = { ...rec.output, ...entitiesOutput(spans, labels) };
        else {
          try {
            body.corrected_output = JSON.parse(outputText);
          } catch (e) {
            throw new Error(`The corrected output is not JSON: ${messageOf(e)}`);
          }
        }
      }
      const f = await api('POST', `/inferences/${rec.id}/feedback`, { body });
      setFeedback({ ...f, corrected_output: body.corrected_output ?? null, notes: body.notes ?? null });
      onDone?.();
    });

  // layout effects: the keys work as soon as the record is on screen
  useLayoutEffect(() => {
    if (!keyboard) return;
    const on = (e: KeyboardEvent) => {
      const t = e.target as HTMLElement;
      if (t.tagName === 'TEXTAREA' || t.tagName === 'INPUT' || t.tagName === 'SELECT') {
        if (e.key === 'Escape') t.blur();
        return;
      }
      if (e.key === 'c') {
        e.preventDefault();
        void submit('correct');
      } else if (e.key === 'x') {
        e.preventDefault();
        void submit('incorrect');
      } else if (e.key === 'n') {
        e.preventDefault();
        notesRef.current?.focus();
      }
    };
    addEventListener('keydown', on);
    return () => removeEventListener('keydown', on);
  });

  return (
    <div data-testid="review">
      <Section
        title={`Inference ${rec.id}`}
        actions={
          <button
            data-testid="judge-now"
            disabled={judging.busy}
            title="Ask the LLM judge configured for this inference's project or team (billed like any call)"
            onClick={() =>
              void judging.run(async () => setJudgement(await api('POST', `/inferences/${rec.id}/judge`)))
            }
          >
            {judging.busy ? 'Judging…' : 'Judge'}
          </button>
        }
      >
        <ErrorBox error={judging.error} />
        <dl class="kv">
          <dt>Created</dt>
          <dd>{fmtDate(rec.created_at)}</dd>
          <dt>Model</dt>
          <dd>
            {rec.model_id}
            {rec.routed_model && rec.routed_model !== rec.model_id ? ` → ${rec.routed_model}` : ''}
          </dd>
          <dt>Task</dt>
          <dd>{rec.task}</dd>
          <dt>Status</dt>
          <dd>
            <Status value={rec.status} />
            {rec.error ? ` ${rec.error}` : ''}
          </dd>
          <dt>Latency</dt>
          <dd>{fmtNum(rec.latency_ms, 1)} ms</dd>
          <dt>Cost</dt>
          <dd>{fmtMoney(rec.cost)}</dd>
          <dt>Usage</dt>
          <dd>
            {rec.usage
              ? `${rec.usage.total_tokens} tokens (${rec.usage.prompt_tokens} in, ` +
                `${rec.usage.completion_tokens} out, ${rec.usage.cache_read_tokens} cached)`
              : '—'}
          </dd>
          {rec.project_id && (
            <>
              <dt>Project</dt>
              <dd>{rec.project_id}</dd>
            </>
          )}
          {rec.training_job_id && (
            <>
              <dt>Training job</dt>
              <dd>
                <a href={`#/training/${rec.training_job_id}`}>{rec.training_job_id}</a>
              </dd>
            </>
          )}
        </dl>
        {(j.llmaj_score != null || j.llmaj_verdict != null || j.llmaj_reasoning != null || j.llmaj_error) && (
          <div class="judge" data-testid="judge">
            <strong>LLM judge{j.llmaj_model ? ` (${j.llmaj_model})` : ''}:</strong> {j.llmaj_verdict ?? ''}{' '}
            {j.llmaj_score != null ? `score ${fmtNum(j.llmaj_score, 3)}` : ''}
            {j.llmaj_reasoning && <p>{j.llmaj_reasoning}</p>}
            {j.llmaj_error && <p class="error-text">{j.llmaj_error}</p>}
          </div>
        )}
      </Section>
      <Section title="Input and output">
        {isEntities ? (
          <SpanText
            text={text}
            spans={spans}
            labels={labels}
            editable
            onChange={(s) => {
              setSpans(s);
              setEdited(true);
            }}
          />
        ) : (
          <>
            <pre class="input-text" data-testid="input-text">
              {text}
            </pre>
            <label>
              Output (edit to correct)
              <textarea
                class="code"
                rows={8}
                value={outputText}
                onInput={(e) => {
                  setOutputText(e.currentTarget.value);
                  setEdited(true);
                }}
              />
            </label>
          </>
        )}
        {isEntities && <p class="muted small">Select text to add a span; click a span to relabel or delete it.</p>}
      </Section>
      <Section title="Review">
        {feedback && (
          <div class="notice" data-testid="feedback">
            Reviewed {fmtDate(feedback.human_feedback_at)}: <strong>{feedback.human_verdict}</strong>
          </div>
        )}
        <label>
          Notes
          <textarea
            ref={notesRef}
            name="notes"
            rows={2}
            maxLength={5000}
            value={notes}
            onInput={(e) => setNotes(e.currentTarget.value)}
          />
        </label>
        <div class="row">
          <button
            class="primary"
            data-testid="mark-correct"
            disabled={act.busy || edited}
            title={edited ? 'The output was edited: submit it as a correction' : ''}
            onClick={() => void submit('correct')}
          >
            Correct{keyboard ? ' (c)' : ''}
          </button>
          <button
            class="danger"
            data-testid="mark-incorrect"
            disabled={act.busy}
            onClick={() => void submit('incorrect')}
          >
            Incorrect{edited ? ', save correction' : ''}
            {keyboard ? ' (x)' : ''}
          </button>
          {edited && (
            <button
              onClick={() => {
                setSpans(original);
                setOutputText(JSON.stringify(rec.output, null, 2));
                setEdited(false);
              }}
            >
              Undo edits
            </button>
          )}
        </div>
        <ErrorBox error={act.error} />
      </Section>
      <details>
        <summary>Raw record</summary>
        <Json value={rec} />
      </details>
    </div>
  );
}

/** The review queue: the most recent inferences one at a time; j/k move, c/x judge, n notes. */
export function ReviewQueue() {
  const list = useResource(() => api('GET', '/inferences', { query: { limit: 100 } }));
  const [i, setI] = useState(0);
  const rows: any[] = list.data?.inferences ?? [];
  useLayoutEffect(() => {
    const on = (e: KeyboardEvent) => {
      const t = e.target as HTMLElement;
      if (t.tagName === 'TEXTAREA' || t.tagName === 'INPUT' || t.tagName === 'SELECT') return;
      if (e.key === 'j') setI((v) => Math.min(rows.length - 1, v + 1));
      if (e.key === 'k') setI((v) => Math.max(0, v - 1));
    };
    addEventListener('keydown', on);
    return () => removeEventListener('keydown', on);
  }, [rows.length]);
  const rec = rows[i];
  return (
    <>
      <h1>Review queue</h1>
      <p class="muted">
        Keys: <kbd>j</kbd>/<kbd>k</kbd> next/previous, <kbd>c</kbd> correct, <kbd>x</kbd> incorrect (with your edits),
        <kbd>n</kbd> notes, <kbd>Esc</kbd> leave a field.
      </p>
      <ErrorBox error={list.error} />
      <Loading when={list.loading && !list.data} />
      {list.data && !rows.length && <div class="muted">No inferences to review.</div>}
      {rec && (
        <>
          <div class="row">
            <span data-testid="queue-pos">
              {i + 1} of {rows.length}
            </span>
            <button onClick={() => setI(Math.max(0, i - 1))}>Previous (k)</button>
            <button onClick={() => setI(Math.min(rows.length - 1, i + 1))}>Next (j)</button>
          </div>
          <Review key={rec.id} rec={rec} keyboard onDone={() => setI((v) => Math.min(rows.length - 1, v + 1))} />
        </>
      )}
    </>
  );
}
