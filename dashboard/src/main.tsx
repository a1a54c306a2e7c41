// The dashboard shell: the session (checked with GET /auth/session on load), the navigation and a
// hash router (#/keys, #/inferences/<id>, …), so the server serves one index.html for every page.
import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import 'uplot/dist/uPlot.min.css';
import './style.css';
import { api, onSessionLost, setCsrf } from './api.ts';
import { SignIn } from './pages/signin.tsx';
import { KeysPage } from './pages/keys.tsx';
import { InferencesPage, InferenceDetail, ReviewQueue } from './pages/inferences.tsx';
import { DatasetsPage, DatasetDetail } from './pages/datasets.tsx';
import { TrainingPage, TrainingDetail } from './pages/training.tsx';
import { PlaygroundPage } from './pages/playground.tsx';
import { UsagePage } from './pages/usage.tsx';
import { ModelsPage } from './pages/models.tsx';
import { EvaluationsPage } from './pages/evaluations.tsx';
import { ProjectsPage, ProjectDetail } from './pages/projects.tsx';

export interface Session {
  user_id: string;
  team_id: string;
  email?: string;
  expires_at: string;
}

const NAV: Array<[string, string]> = [
  ['inferences', 'Inferences'],
  ['review', 'Review queue'],
  ['training', 'Training jobs'],
  ['datasets', 'Datasets'],
  ['playground', 'Playground'],
  ['evaluations', 'Evaluations'],
  ['projects', 'Projects'],
  ['models', 'Models'],
  ['usage', 'Usage & billing'],
  ['keys', 'API keys'],
];

function useHash(): string[] {
  const read = () => location.hash.replace(/^#\/?/, '').split('/').filter(Boolean).map(decodeURIComponent);
  const [parts, setParts] = useState(read);
  useEffect(() => {
    const on = () => setParts(read());
    addEventListener('hashchange', on);
    return () => removeEventListener('hashchange', on);
  }, []);
  return parts;
}

function Page({ parts }: { parts: string[] }) {
  const [page, id] = parts;
  switch (page ?? 'inferences') {
    case 'keys':
      return <KeysPage />;
    case 'inferences':
      return id ? <InferenceDetail id={id} /> : <InferencesPage />;
    case 'review':
      return <ReviewQueue />;
    case 'datasets':
      return id ? <DatasetDetail name={id} /> : <DatasetsPage />;
    case 'training':
      return id ? <TrainingDetail id={id} /> : <TrainingPage />;
    case 'playground':
      return <PlaygroundPage />;
    case 'usage':
      return <UsagePage />;
    case 'models':
      return <ModelsPage />;
    case 'evaluations':
      return <EvaluationsPage />;
    case 'projects':
      return id ? <ProjectDetail id={id} /> : <ProjectsPage />;
    default:
      return (
        <div class="error" role="alert">
          No page #{parts.join('/')}
        </div>
      );
  }
}

function App() {
  const [session, setSession] = useState<Session | null>(null);
  const [checking, setChecking] = useState(true);
  const [notice, setNotice] = useState<string | null>(null);
  const parts = useHash();

  useEffect(() => {
    onSessionLost((why) => {
      setCsrf(null);
      setSession(null);
      setNotice(`Signed out: ${why}`);
    });
    api('GET', '/auth/session')
      .then((s) => {
        setCsrf(s.csrf_token);
        setSession(s);
      })
      .catch(() => setSession(null))
      .finally(() => setChecking(false));
  }, []);

  if (checking) return <div class="center muted">Loading…</div>;
  if (!session) {
    return (
      <SignIn
        notice={notice}
        onSignedIn={(s) => {
          setNotice(null);
          setSession(s);
        }}
      />
    );
  }
  const signOut = async () => {
    try {
      await api('POST', '/auth/logout');
    } catch {
      /* the session is gone either way */
    }
    setCsrf(null);
    setSession(null);
    setNotice('You signed out.');
  };
  const current = parts[0] ?? 'inferences';
  return (
    <div class="shell">
      <nav class="side">
        <div class="brand">Loom</div>
        {NAV.map(([k, label]) => (
          <a key={k} href={`#/${k}`} class={current === k ? 'active' : ''}>
            {label}
          </a>
        ))}
        <div class="who">
          <div class="muted small" data-testid="who">
            {session.email ?? 'signed in'}
          </div>
          <button data-testid="sign-out" onClick={signOut}>
            Sign out
          </button>
        </div>
      </nav>
      <main class="content">
        <Page parts={parts} />
      </main>
    </div>
  );
}

render(<App />, document.getElementById('app')!);
