// Sign in, or, on a server with no user yet, create the first one (POST /auth/setup). Later users
// are created by an admin (`loom admin create-user`). Failed attempts are rate-limited by the server.
import { useEffect, useState } from 'preact/hooks';
import { api, setCsrf } from '../api.ts';
import { ErrorBox, useAction } from '../ui.tsx';
import type { Session } from '../main.tsx';

export function SignIn({ notice, onSignedIn }: { notice: string | null; onSignedIn: (s: Session) => void }) {
  const [setup, setSetup] = useState<boolean | null>(null);
  const [email, setEmail] = useState('');
  const [password, setPassword] = useState('');
  const [team, setTeam] = useState('');
  const act = useAction();

  useEffect(() => {
    api('GET', '/auth/setup')
      .then((r) => setSetup(!!r.needs_setup))
      .catch((e) => {
        setSetup(false);
        act.setError(String(e.message));
      });
  }, []);

  const submit = (e: Event) => {
    e.preventDefault();
    void act.run(async () => {
      const body = setup ? { email, password, ...(team ? { team_name: team } : {}) } : { email, password };
      const r = await api('POST', setup ? '/auth/setup' : '/auth/login', { body });
      setCsrf(r.csrf_token);
      setPassword('');
      onSignedIn({ user_id: r.user.id, team_id: r.team_id, email: r.user.email, expires_at: r.expires_at });
    });
  };

  return (
    <div class="center">
      <form class="card signin" onSubmit={submit}>
        <h1>Loom</h1>
        {setup ? (
          <p>This server has no user yet. Create the first one (an admin of a new team).</p>
        ) : (
          <p>Sign in to the dashboard.</p>
        )}
        {notice && <div class="notice">{notice}</div>}
        <label>
          Email
          <input
            name="email"
            type="email"
            autoComplete="username"
            required
            value={email}
            onInput={(e) => setEmail(e.currentTarget.value)}
          />
        </label>
        <label>
          Password
          <input
            name="password"
            type="password"
            autoComplete={setup ? 'new-password' : 'current-password'}
            required
            minLength={setup ? 8 : 1}
            value={password}
            onInput={(e) => setPassword(e.currentTarget.value)}
          />
        </label>
        {setup && (
          <label>
            Team name (optional)
            <input name="team" value={team} onInput={(e) => setTeam(e.currentTarget.value)} />
          </label>
        )}
        <ErrorBox error={act.error} />
        <button class="primary" type="submit" disabled={act.busy || setup === null}>
          {setup ? 'Create the first user' : 'Sign in'}
        </button>
      </form>
    </div>
  );
}
