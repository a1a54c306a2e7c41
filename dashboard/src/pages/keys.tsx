// Settings → API keys: create (the secret shown once, with a copy button), list, revoke with a
// confirmation. Revoked keys get 401 at once (the API re-reads the key on every request).
import { useState } from 'preact/hooks';
import { api } from '../api.ts';
import {
  ConfirmButton,
  CopyButton,
  ErrorBox,
  Loading,
  Section,
  Table,
  fmtDate,
  fmtMoney,
  useAction,
  useResource,
} from '../ui.tsx';

export function KeysPage() {
  const keys = useResource(() => api('GET', '/list-api-keys'));
  const [name, setName] = useState('');
  const [expires, setExpires] = useState('');
  const [secret, setSecret] = useState<{ name: string; value: string } | null>(null);
  const act = useAction();

  const create = (e: Event) => {
    e.preventDefault();
    void act.run(async () => {
      const body: Record<string, unknown> = { name };
      if (expires) body.expires_at = new Date(expires).toISOString();
      const k = await api('POST', '/create-api-key', { body });
      setSecret({ name: k.name, value: k.secret_key });
      setName('');
      setExpires('');
      await keys.reload();
    });
  };
  const revoke = (id: string) =>
    act.run(async () => {
      await api('DELETE', '/delete-api-key', { body: { key_id: id } });
      await keys.reload();
    });

  return (
    <>
      <h1>API keys</h1>
      <Section title="Create a key">
        <form class="row" onSubmit={create}>
          <label>
            Name
            <input
              name="key-name"
              required
              maxLength={200}
              value={name}
              onInput={(e) => setName(e.currentTarget.value)}
            />
          </label>
          <label>
            Expires (optional)
            <input
              name="key-expires"
              type="datetime-local"
              value={expires}
              onInput={(e) => setExpires(e.currentTarget.value)}
            />
          </label>
          <button class="primary" type="submit" disabled={act.busy}>
            Create key
          </button>
        </form>
        {secret && (
          <div class="secret" data-testid="new-secret">
            <strong>Key “{secret.name}” created. Copy it now: you will not see it again.</strong>
            <div class="row">
              <code data-testid="secret-value">{secret.value}</code>
              <CopyButton text={secret.value} />
            </div>
            <button onClick={() => setSecret(null)}>I have stored it</button>
          </div>
        )}
        <ErrorBox error={act.error} />
      </Section>
      <Section title="Keys">
        <ErrorBox error={keys.error} />
        <Loading when={keys.loading && !keys.data} />
        {keys.data && (
          <Table
            testid="keys-table"
            head={['Name', 'Key', 'Created', 'Expires', 'Last used', 'Requests', 'Tokens', 'Cost', '']}
            rows={keys.data.keys}
            rowKey={(k: any) => k.id}
            rowAttrs={(k: any) => ({ 'data-key-id': k.id })}
            cells={(k: any) => [
              k.name,
              <code>loom_sk_…{k.api_key_last_digits}</code>,
              fmtDate(k.created_at),
              k.expires_at ? fmtDate(k.expires_at) : 'never',
              fmtDate(k.last_used_at),
              k.request_count,
              k.usage_tokens,
              fmtMoney(k.usage_cost),
              <ConfirmButton
                label="Revoke"
                danger
                testid="revoke"
                question="Revoke this key? Calls with it fail at once."
                onConfirm={() => void revoke(k.id)}
              />,
            ]}
            empty="No keys yet."
          />
        )}
      </Section>
    </>
  );
}
