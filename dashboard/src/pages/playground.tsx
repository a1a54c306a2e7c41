// Playground: the encoder form (text, a schema builder for entities / classifications / structures /
// relations, threshold; spans highlighted) on POST /inference, and a decoder chat on
// POST /v1/chat/completions (streaming, temperature, max tokens, JSON-schema output, a prompt-cache
// marker on the system prompt), with each call's usage and cost. Inference calls take an API key,
// as the SDKs do: paste one, or create a playground key; it is held in this page's memory only.
import { useState } from 'preact/hooks';
import { api, authHeaders, errorMessage, sse } from '../api.ts';
import { SpanText, spansOf } from '../spans.tsx';
import { ErrorBox, Json, Section, fmtMoney, useAction, useResource } from '../ui.tsx';

let heldKey = '';

function KeyBox({ value, onChange }: { value: string; onChange: (k: string) => void }) {
  const act = useAction();
  return (
    <Section title="API key for the playground">
      <div class="row">
        <input
          class="grow"
          type="password"
          autoComplete="off"
          placeholder="loom_sk_… (kept in memory only)"
          value={value}
          onInput={(e) => {
            heldKey = e.currentTarget.value;
            onChange(heldKey);
          }}
        />
        <button
          onClick={() =>
            void act.run(async () => {
              const k = await api('POST', '/create-api-key', {
                body: { name: `playground ${new Date().toISOString().slice(0, 16)}` },
              });
              heldKey = k.secret_key;
              onChange(heldKey);
            })
          }
        >
          Create a playground key
        </button>
      </div>
      <ErrorBox error={act.error} />
    </Section>
  );
}

export function PlaygroundPage() {
  const [key, setKey] = useState(heldKey);
  const [tab, setTab] = useState<'encoder' | 'decoder'>('encoder');
  const models = useResource(() => api('GET', '/base-models', { query: { supports_inference: true } }));
  const trained = useResource(() => api('GET', '/felix/trained-models'));
  const all = [
    ...(models.data?.models ?? []),
    ...(trained.data?.models ?? []).map((m: any) => ({ id: m.id, name: m.model_name, task_type: m.task_type })),
  ];
  return (
    <>
      <h1>Playground</h1>
      <KeyBox value={key} onChange={setKey} />
      <div class="tabs">
        <button class={tab === 'encoder' ? 'active' : ''} onClick={() => setTab('encoder')}>
          Encoder (extraction)
        </button>
        <button class={tab === 'decoder' ? 'active' : ''} onClick={() => setTab('decoder')}>
          Decoder (chat)
        </button>
      </div>
      <ErrorBox error={models.error} />
      {tab === 'encoder' ? (
        <Encoder apiKey={key} models={all.filter((m) => m.task_type === 'encoder')} />
      ) : (
        <Decoder apiKey={key} models={all.filter((m) => m.task_type === 'decoder')} />
      )}
    </>
  );
}

function ModelPick({ models, value, onChange }: { models: any[]; value: string; onChange: (v: string) => void }) {
  return (
    <label>
      Model
      <input list="pg-models" required value={value} onInput={(e) => onChange(e.currentTarget.value)} />
      <datalist id="pg-models">
        {models.map((m) => (
          <option key={m.id} value={m.id}>
            {m.name}
          </option>
        ))}
      </datalist>
    </label>
  );
}

function Encoder({ apiKey, models }: { apiKey: string; models: any[] }) {
  const [model, setModel] = useState('');
  const [text, setText] = useState('');
  const [entities, setEntities] = useState('');
  const [classes, setClasses] = useState<Array<{ task: string; labels: string }>>([]);
  const [structures, setStructures] = useState('');
  const [relations, setRelations] = useState('');
  const [threshold, setThreshold] = useState('0.5');
  const [res, setRes] = useState<any>(null);
  const act = useAction();
  const list = (s: string) =>
    s
      .split(',')
      .map((x) => x.trim())
      .filter(Boolean);
  const submit = (e: Event) => {
    e.preventDefault();
    void act.run(async () => {
      const schema: Record<string, unknown> = {};
      if (list(entities).length) schema.entities = list(entities);
      const cls = classes
        .filter((c) => c.task && list(c.labels).length)
        .map((c) => ({ task: c.task, labels: list(c.labels) }));
      if (cls.length) schema.classifications = cls;
      if (structures.trim()) {
        try {
          schema.structures = JSON.parse(structures);
        } catch {
          throw new Error('Structures must be a JSON object');
        }
      }
      if (relations.trim()) {
        try {
          schema.relations = JSON.parse(relations);
        } catch {
          throw new Error('Relations must be a JSON array');
        }
      }
      setRes(
        await api('POST', '/inference', {
          key: apiKey,
          body: { model_id: model, text, schema, threshold: Number(threshold) },
        }),
      );
    });
  };
  const output = res?.result ?? res;
  return (
    <Section title="Encoder">
      <form class="grid-form" onSubmit={submit}>
        <ModelPick models={models} value={model} onChange={setModel} />
        <label>
          Threshold
          <input
            type="number"
            min={0}
            max={1}
            step={0.05}
            value={threshold}
            onInput={(e) => setThreshold(e.currentTarget.value)}
          />
        </label>
        <label class="wide">
          Text
          <textarea rows={4} required value={text} onInput={(e) => setText(e.currentTarget.value)} />
        </label>
        <label class="wide">
          Entities (comma-separated)
          <input
            value={entities}
            placeholder="person, organization, city"
            onInput={(e) => setEntities(e.currentTarget.value)}
          />
        </label>
        <fieldset class="wide">
          <legend>Classifications</legend>
          {classes.map((c, i) => (
            <div class="row" key={i}>
              <input
                placeholder="task (e.g. sentiment)"
                value={c.task}
                onInput={(e) =>
                  setClasses(classes.map((x, j) => (j === i ? { ...x, task: e.currentTarget.value } : x)))
                }
              />
              <input
                class="grow"
                placeholder="labels (comma-separated)"
                value={c.labels}
                onInput={(e) =>
                  setClasses(classes.map((x, j) => (j === i ? { ...x, labels: e.currentTarget.value } : x)))
                }
              />
              <button type="button" onClick={() => setClasses(classes.filter((_, j) => j !== i))}>
                Remove
              </button>
            </div>
          ))}
          <button type="button" onClick={() => setClasses([...classes, { task: '', labels: '' }])}>
            Add a classification
          </button>
        </fieldset>
        <label class="wide">
          Structures (JSON object, optional)
          <textarea
            class="code"
            rows={2}
            value={structures}
            placeholder='{"product": {"name": "string", "price": "number"}}'
            onInput={(e) => setStructures(e.currentTarget.value)}
          />
        </label>
        <label class="wide">
          Relations (JSON array, optional)
          <textarea
            class="code"
            rows={2}
            value={relations}
            placeholder='[{"name": "works_for", "head": "person", "tail": "organization"}]'
            onInput={(e) => setRelations(e.currentTarget.value)}
          />
        </label>
        <div class="wide">
          <button class="primary" type="submit" disabled={act.busy || !apiKey}>
            Run
          </button>
          {!apiKey && <span class="muted"> Set an API key above.</span>}
        </div>
      </form>
      <ErrorBox error={act.error} />
      {res && (
        <>
          {output?.entities && <SpanText text={text} spans={spansOf(output, text)} labels={list(entities)} />}
          <p class="muted">
            Usage: {res.usage?.total_tokens ?? '—'} tokens · cost {fmtMoney(res.cost)} ·{' '}
            {res.latency_ms ?? '—'} ms ·{' '}
            <a href={`#/inferences/${res.inference_id}`}>record</a>
          </p>
          <Json value={output} />
        </>
      )}
    </Section>
  );
}

interface Msg {
  role: 'user' | 'assistant';
  content: string;
}

function Decoder({ apiKey, models }: { apiKey: string; models: any[] }) {
  const [model, setModel] = useState('');
  const [system, setSystem] = useState('');
  const [cacheSystem, setCacheSystem] = useState(false);
  const [msgs, setMsgs] = useState<Msg[]>([]);
  const [draft, setDraft] = useState('');
  const [temperature, setTemperature] = useState('0.7');
  const [maxTokens, setMaxTokens] = useState('256');
  const [stream, setStream] = useState(true);
  const [jsonSchema, setJsonSchema] = useState('');
  const [partial, setPartial] = useState<string | null>(null);
  const [usage, setUsage] = useState<any>(null);
  const act = useAction();

  const send = (e: Event) => {
    e.preventDefault();
    const history: Msg[] = [...msgs, { role: 'user', content: draft }];
    setMsgs(history);
    setDraft('');
    setUsage(null);
    void act
      .run(async () => {
        const messages: unknown[] = [];
        if (system)
          messages.push({
            role: 'system',
            content: cacheSystem ? [{ type: 'text', text: system, cache_control: { type: 'ephemeral' } }] : system,
          });
        messages.push(...history);
        const body: Record<string, unknown> = {
          model,
          messages,
          max_tokens: Number(maxTokens),
          temperature: Number(temperature),
          stream,
        };
        if (stream) body.stream_options = { include_usage: true };
        if (jsonSchema.trim()) {
          let schema: unknown;
          try {
            schema = JSON.parse(jsonSchema);
          } catch {
            throw new Error('The JSON schema is not valid JSON');
          }
          body.response_format = { type: 'json_schema', json_schema: { name: 'output', schema, strict: true } };
        }
        const r = await fetch('/v1/chat/completions', {
          method: 'POST',
          headers: { ...authHeaders('POST', apiKey), 'Content-Type': 'application/json' },
          body: JSON.stringify(body),
        });
        if (!r.ok) {
          const t = await r.text();
          let b: unknown = t;
          try {
            b = JSON.parse(t);
          } catch {
            /* text */
          }
          throw new Error(errorMessage(b, r.status));
        }
        let text = '';
        let u: any = null;
        let id: string | null = null;
        if (stream) {
          setPartial('');
          for await (const ev of sse(r)) {
            if (ev.data === '[DONE]') break;
            const c = JSON.parse(ev.data);
            if (c.error) throw new Error(c.error.message ?? 'stream error');
            id ??= c.x_service?.inference_id ?? null;
            if (c.usage) u = c.usage;
            const d = c.choices?.[0]?.delta?.content;
            if (d) {
              text += d;
              setPartial(text);
            }
          }
        } else {
          const b = await r.json();
          text = b.choices?.[0]?.message?.content ?? '';
          u = b.usage;
          id = b.x_service?.inference_id ?? null;
        }
        setPartial(null);
        setMsgs([...history, { role: 'assistant', content: text }]);
        let cost: number | null = null;
        if (id) {
          try {
            cost = (await api('GET', `/inferences/${id}`)).cost;
          } catch {
            /* the record may be stored a moment later */
          }
        }
        setUsage({ ...u, cost, inference_id: id });
      })
      .finally(() => setPartial(null));
  };
  return (
    <Section title="Decoder chat">
      <div class="grid-form">
        <ModelPick models={models} value={model} onChange={setModel} />
        <label>
          Temperature
          <input
            type="number"
            min={0}
            max={2}
            step={0.1}
            value={temperature}
            onInput={(e) => setTemperature(e.currentTarget.value)}
          />
        </label>
        <label>
          Max tokens
          <input type="number" min={1} value={maxTokens} onInput={(e) => setMaxTokens(e.currentTarget.value)} />
        </label>
        <label class="check">
          <input type="checkbox" checked={stream} onChange={(e) => setStream(e.currentTarget.checked)} />
          Stream
        </label>
        <label class="wide">
          System prompt
          <textarea rows={2} value={system} onInput={(e) => setSystem(e.currentTarget.value)} />
        </label>
        <label class="check wide">
          <input type="checkbox" checked={cacheSystem} onChange={(e) => setCacheSystem(e.currentTarget.checked)} />
          Mark the system prompt for the prompt cache (cache_control: ephemeral)
        </label>
        <label class="wide">
          JSON schema of the output (optional)
          <textarea class="code" rows={2} value={jsonSchema} onInput={(e) => setJsonSchema(e.currentTarget.value)} />
        </label>
      </div>
      <div class="chat" data-testid="chat">
        {msgs.map((m, i) => (
          <div key={i} class={`msg ${m.role}`}>
            <b>{m.role}</b>
            <div class="pre">{m.content}</div>
          </div>
        ))}
        {partial !== null && (
          <div class="msg assistant">
            <b>assistant</b>
            <div class="pre">{partial}▍</div>
          </div>
        )}
      </div>
      <form class="row" onSubmit={send}>
        <input
          class="grow"
          required
          placeholder="Message"
          value={draft}
          onInput={(e) => setDraft(e.currentTarget.value)}
        />
        <button class="primary" type="submit" disabled={act.busy || !apiKey || !model}>
          Send
        </button>
        <button
          type="button"
          onClick={() => {
            setMsgs([]);
            setUsage(null);
          }}
        >
          Clear
        </button>
      </form>
      <ErrorBox error={act.error} />
      {usage && (
        <p class="muted" data-testid="chat-usage">
          Usage: {usage.prompt_tokens ?? '—'} prompt ({usage.prompt_tokens_details?.cached_tokens ?? 0} cached) +{' '}
          {usage.completion_tokens ?? '—'} completion tokens · cost {fmtMoney(usage.cost)}
          {usage.inference_id && (
            <>
              {' '}
              · <a href={`#/inferences/${usage.inference_id}`}>record</a>
            </>
          )}
        </p>
      )}
    </Section>
  );
}
