// Entity spans over a text: highlighted marks (text nodes, so any markup in the text renders as
// text), and, when editable, select text to add a span, click a span to relabel or delete it.
import { useState } from 'preact/hooks';

export interface Span {
  label: string;
  start: number;
  end: number;
  text: string;
  confidence?: number;
}

/** the `entities` member of an encoder output as a flat list of spans (found in the text when the output has none) */
export function spansOf(output: any, text: string): Span[] {
  const ents = output?.entities;
  const out: Span[] = [];
  if (!ents || typeof ents !== 'object') return out;
  const list: Array<[string, any]> = Array.isArray(ents)
    ? ents.map((e: any) => [String(e.label ?? e.type ?? ''), e])
    : Object.entries(ents).flatMap(([label, arr]) =>
        Array.isArray(arr) ? arr.map((e) => [label, e] as [string, any]) : [],
      );
  for (const [label, e] of list) {
    const t = typeof e === 'string' ? e : String(e?.text ?? '');
    let start = typeof e?.start === 'number' ? e.start : text.indexOf(t);
    if (start < 0) start = 0;
    const end = typeof e?.end === 'number' ? e.end : start + t.length;
    out.push({
      label,
      start,
      end,
      text: text.slice(start, end) || t,
      confidence: typeof e?.confidence === 'number' ? e.confidence : undefined,
    });
  }
  return out.sort((a, b) => a.start - b.start || a.end - b.end);
}

/** spans back to the output's shape: `{entities: {label: [{text, start, end}]}}`, every label of `labels` kept */
export function entitiesOutput(
  spans: Span[],
  labels: string[],
): { entities: Record<string, Array<{ text: string; start: number; end: number }>> } {
  const entities: Record<string, Array<{ text: string; start: number; end: number }>> = {};
  for (const l of labels) entities[l] = [];
  for (const s of spans) (entities[s.label] ??= []).push({ text: s.text, start: s.start, end: s.end });
  return { entities };
}

/** one of 12 colour classes per label, far apart for nearby hashes (the CSP forbids inline style attributes) */
export function labelClass(label: string): string {
  let h = 2166136261;
  for (const c of label) h = Math.imul(h ^ c.charCodeAt(0), 16777619) >>> 0;
  return `lc${((h % 12) * 5) % 12}`;
}

/** offset of a DOM point inside a SpanText (segments carry data-start) */
function offsetOf(node: Node | null, off: number): number | null {
  const el = node?.nodeType === Node.TEXT_NODE ? node.parentElement : (node as Element | null);
  const seg = el?.closest?.('[data-start]') as HTMLElement | null;
  if (!seg) return null;
  return Number(seg.dataset.start) + (node?.nodeType === Node.TEXT_NODE ? off : 0);
}

export function SpanText(props: {
  text: string;
  spans: Span[];
  labels: string[];
  editable?: boolean;
  onChange?: (s: Span[]) => void;
}) {
  const { text, spans } = props;
  const [selected, setSelected] = useState<number | null>(null);
  const [pending, setPending] = useState<{ start: number; end: number } | null>(null);
  const [newLabel, setNewLabel] = useState('');

  // non-overlapping segments for display (an overlapping span is still listed and editable)
  const segs: Array<{ start: number; end: number; span: number | null }> = [];
  let pos = 0;
  spans.forEach((s, i) => {
    if (s.start < pos) return;
    if (s.start > pos) segs.push({ start: pos, end: s.start, span: null });
    segs.push({ start: s.start, end: s.end, span: i });
    pos = s.end;
  });
  if (pos < text.length) segs.push({ start: pos, end: text.length, span: null });

  const onMouseUp = () => {
    if (!props.editable) return;
    const sel = getSelection();
    if (!sel || sel.isCollapsed) return;
    let a = offsetOf(sel.anchorNode, sel.anchorOffset);
    let b = offsetOf(sel.focusNode, sel.focusOffset);
    if (a === null || b === null) return;
    if (a > b) [a, b] = [b, a];
    while (a < b && /\s/.test(text[a])) a++;
    while (b > a && /\s/.test(text[b - 1])) b--;
    if (b > a) {
      setPending({ start: a, end: b });
      setSelected(null);
      setNewLabel(props.labels[0] ?? '');
    }
  };
  const change = (s: Span[]) => props.onChange?.(s.sort((x, y) => x.start - y.start || x.end - y.end));
  const sp = selected !== null ? spans[selected] : null;

  return (
    <div class="spans">
      <div class="span-text" data-testid="span-text" onMouseUp={onMouseUp}>
        {segs.map((g) =>
          g.span === null ? (
            <span key={g.start} data-start={g.start}>
              {text.slice(g.start, g.end)}
            </span>
          ) : (
            <mark
              key={g.start}
              data-start={g.start}
              data-label={spans[g.span].label}
              class={`${labelClass(spans[g.span].label)}${selected === g.span ? ' sel' : ''}`}
              onClick={() => {
                if (props.editable) {
                  setSelected(g.span);
                  setPending(null);
                }
              }}
            >
              {text.slice(g.start, g.end)}
              <small class="tag">{spans[g.span].label}</small>
            </mark>
          ),
        )}
      </div>
      {props.editable && pending && (
        <div class="span-edit" data-testid="span-add">
          Add “{text.slice(pending.start, pending.end)}” as
          <LabelInput labels={props.labels} value={newLabel} onInput={setNewLabel} />
          <button
            class="primary"
            disabled={!newLabel}
            onClick={() => {
              change([
                ...spans,
                {
                  label: newLabel,
                  start: pending.start,
                  end: pending.end,
                  text: text.slice(pending.start, pending.end),
                },
              ]);
              setPending(null);
            }}
          >
            Add span
          </button>
          <button onClick={() => setPending(null)}>Cancel</button>
        </div>
      )}
      {props.editable && sp && selected !== null && (
        <div class="span-edit" data-testid="span-selected">
          “{sp.text}” is
          <LabelInput
            labels={props.labels}
            value={sp.label}
            onInput={(l) => change(spans.map((s, i) => (i === selected ? { ...s, label: l } : s)))}
          />
          <button
            class="danger"
            data-testid="span-delete"
            onClick={() => {
              change(spans.filter((_, i) => i !== selected));
              setSelected(null);
            }}
          >
            Delete span
          </button>
          <button onClick={() => setSelected(null)}>Done</button>
        </div>
      )}
    </div>
  );
}

function LabelInput({ labels, value, onInput }: { labels: string[]; value: string; onInput: (v: string) => void }) {
  return (
    <>
      <select
        data-testid="span-label"
        value={labels.includes(value) ? value : ''}
        onChange={(e) => onInput(e.currentTarget.value)}
      >
        {!labels.includes(value) && <option value="">(other)</option>}
        {labels.map((l) => (
          <option key={l} value={l}>
            {l}
          </option>
        ))}
      </select>
      <input
        class="narrow"
        aria-label="label"
        placeholder="or type a label"
        value={value}
        onInput={(e) => onInput(e.currentTarget.value)}
      />
    </>
  );
}
