// The LLM judge's configuration (PUT|GET|DELETE /judge for the team, /projects/:id/judge for one
// project): model, rubric, sample rate and score scale; the other keys keep the server's defaults.
// No configuration is a 404 from the API, shown as an empty form.
import { useState } from 'preact/hooks';
import { ApiError, api } from './api.ts';
import { ErrorBox, Section, fmtDate, useAction, useResource } from './ui.tsx';

/** the server's defaults (src/service/judge JUDGE_DEFAULTS), shown as placeholders */
const DEFAULTS = { sample_rate: 0, score_scale: 10 };

async function getOrNull(path: string) {
  try {
    return await api('GET', path);
  } catch (e) {
    if (e instanceof ApiError && e.status === 404) return null;
    throw e;
  }
}

/** a number input's value: blank → left out (the server's default), else the number (the API checks its range) */
const num = (s: string) => (s.trim() === '' ? undefined : Number(s));

export function JudgeConfig({ path, title, testid }: { path: string; title: string; testid: string }) {
  const cfg = useResource(() => getOrNull(path), [path]);
  const act = useAction();
  const [form, setForm] = useState<Record<string, string> | null>(null);
  const c = cfg.data;
  const f = form ?? {
    model: c?.model ?? '',
    rubric: c?.rubric ?? '',
    sample_rate: c ? String(c.sample_rate) : '',
    score_scale: c ? String(c.score_scale) : '',
  };
  const set = (k: string) => (e: Event) => setForm({ ...f, [k]: (e.currentTarget as HTMLInputElement).value });
  const save = () =>
    act.run(async () => {
      const body = {
        model: f.model,
        rubric: f.rubric,
        sample_rate: num(f.sample_rate),
        score_scale: num(f.score_scale),
      };
      cfg.setData(await api('PUT', path, { body }));
      setForm(null);
    });
  return (
    <Section title={title}>
      <div data-testid={testid}>
        <p class="muted small">
          {c
            ? `Configured, updated ${fmtDate(c.updated_at)}.`
            : cfg.loading
              ? 'Loading…'
              : 'No judge configured here.'}{' '}
          A project's judge replaces the team's for that project's inferences.
        </p>
        <form
          class="grid-form"
          onSubmit={(e) => {
            e.preventDefault();
            void save();
          }}
        >
          <label>
            Judge model
            <input name="judge-model" value={f.model} onInput={set('model')} placeholder="a decoder of the catalog" />
          </label>
          <label>
            Sample rate (0–1)
            <input name="judge-sample-rate" value={f.sample_rate} onInput={set('sample_rate')}
              placeholder={`default ${DEFAULTS.sample_rate}`} />
          </label>
          <label>
            Score scale (1–100)
            <input name="judge-score-scale" value={f.score_scale} onInput={set('score_scale')}
              placeholder={`default ${DEFAULTS.score_scale}`} />
          </label>
          <label class="wide">
            Rubric
            <textarea name="judge-rubric" rows={3} value={f.rubric} onInput={set('rubric')} />
          </label>
          <div class="row wide">
            <button class="primary" type="submit" disabled={act.busy}>
              Save judge
            </button>
            {c && (
              <button
                type="button"
                class="danger"
                disabled={act.busy}
                onClick={() =>
                  void act.run(async () => {
                    await api('DELETE', path);
                    cfg.setData(null);
                    setForm(null);
                  })
                }
              >
                Remove judge
              </button>
            )}
          </div>
        </form>
        <ErrorBox error={act.error ?? cfg.error} />
      </div>
    </Section>
  );
}
