// Shared pieces of the pages: loading a resource with its error, the error box (the API's message,
// never a blank page), buttons that confirm, copy-to-clipboard, formatting.
import type { ComponentChildren } from 'preact';
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { ApiError } from './api.ts';

export function messageOf(e: unknown): string {
  if (e instanceof ApiError) return e.status ? `${e.message} (HTTP ${e.status})` : e.message;
  return e instanceof Error ? e.message : String(e);
}

/** loads `fn` on mount and whenever `deps` change; `reload` runs it again */
export function useResource<T>(fn: () => Promise<T>, deps: unknown[] = []) {
  const [data, setData] = useState<T | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [loading, setLoading] = useState(true);
  const seq = useRef(0);
  const reload = useCallback(async () => {
    const my = ++seq.current;
    setLoading(true);
    try {
      const v = await fn();
      if (my === seq.current) {
        setData(v);
        setError(null);
      }
    } catch (e) {
      if (my === seq.current) setError(messageOf(e));
    } finally {
      if (my === seq.current) setLoading(false);
    }
  }, deps);
  useEffect(() => {
    void reload();
  }, [reload]);
  return { data, error, loading, reload, setData };
}

/** runs an action, holding its error for display; returns the action's result or undefined */
export function useAction() {
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const run = useCallback(async <T,>(fn: () => Promise<T>): Promise<T | undefined> => {
    setBusy(true);
    setError(null);
    try {
      return await fn();
    } catch (e) {
      setError(messageOf(e));
      return undefined;
    } finally {
      setBusy(false);
    }
  }, []);
  return { error, busy, run, setError };
}

export function ErrorBox({ error }: { error: string | null | undefined }) {
  if (!error) return null;
  return (
    <div class="error" role="alert">
      {error}
    </div>
  );
}

export function Loading({ when }: { when: boolean }) {
  return when ? <div class="muted">Loading…</div> : null;
}

/** a button that asks "are you sure?" in place before running `onConfirm` */
export function ConfirmButton(props: {
  label: string;
  question: string;
  onConfirm: () => void;
  danger?: boolean;
  testid?: string;
}) {
  const [asking, setAsking] = useState(false);
  if (!asking) {
    return (
      <button class={props.danger ? 'danger' : ''} data-testid={props.testid} onClick={() => setAsking(true)}>
        {props.label}
      </button>
    );
  }
  return (
    <span class="confirm">
      {props.question}{' '}
      <button
        class="danger"
        data-testid={props.testid && `${props.testid}-yes`}
        onClick={() => {
          setAsking(false);
          props.onConfirm();
        }}
      >
        Yes
      </button>
      <button onClick={() => setAsking(false)}>No</button>
    </span>
  );
}

export function CopyButton({ text, label = 'Copy' }: { text: string; label?: string }) {
  const [done, setDone] = useState(false);
  return (
    <button
      type="button"
      onClick={async () => {
        try {
          await navigator.clipboard.writeText(text);
          setDone(true);
          setTimeout(() => setDone(false), 1500);
        } catch {
          setDone(false);
        }
      }}
    >
      {done ? 'Copied' : label}
    </button>
  );
}

export function Section({
  title,
  children,
  actions,
}: {
  title: string;
  children: ComponentChildren;
  actions?: ComponentChildren;
}) {
  return (
    <section class="card">
      <header class="card-head">
        <h2>{title}</h2>
        {actions}
      </header>
      {children}
    </section>
  );
}

/**
 * A list as a table: one header cell per `head` entry, one row per item (`cells` gives its cells in the
 * same order), and `empty` in a full-width row when there are no items.
 */
export function Table<T>(props: {
  head: ComponentChildren[];
  rows: T[];
  rowKey: (r: T) => string | number;
  cells: (r: T) => ComponentChildren[];
  empty?: ComponentChildren;
  testid?: string;
  rowAttrs?: (r: T) => Record<string, string | number | undefined>;
}) {
  const { head, rows, rowKey, cells, empty, testid, rowAttrs } = props;
  return (
    <table data-testid={testid}>
      <thead>
        <tr>
          {head.map((h, i) => (
            <th key={i}>{h}</th>
          ))}
        </tr>
      </thead>
      <tbody>
        {rows.map((r) => (
          <tr key={rowKey(r)} {...rowAttrs?.(r)}>
            {cells(r).map((c, i) => (
              <td key={i}>{c}</td>
            ))}
          </tr>
        ))}
        {!rows.length && empty !== undefined && (
          <tr>
            <td colSpan={head.length} class="muted">
              {empty}
            </td>
          </tr>
        )}
      </tbody>
    </table>
  );
}

export function Status({ value }: { value: string | null | undefined }) {
  return <span class={`status status-${value ?? 'none'}`}>{value ?? '—'}</span>;
}

export const fmtDate = (s: string | null | undefined) => (s ? new Date(s).toLocaleString() : '—');
export const fmtNum = (n: number | null | undefined, d = 4) =>
  typeof n === 'number' && Number.isFinite(n) ? String(Number(n.toFixed(d))) : '—';
export const fmtMoney = (n: number | null | undefined) =>
  typeof n === 'number' ? `$${n.toFixed(n < 1 ? 6 : 2)}` : '—';

/** polls `fn` every `ms` while `active` */
export function useInterval(fn: () => void, ms: number, active = true) {
  const saved = useRef(fn);
  saved.current = fn;
  useEffect(() => {
    if (!active) return;
    const t = setInterval(() => saved.current(), ms);
    return () => clearInterval(t);
  }, [ms, active]);
}

export function Json({ value }: { value: unknown }) {
  return <pre class="json">{JSON.stringify(value, null, 2)}</pre>;
}
