// Projects: create, list, the team's LLM judge, and a project's deployments (history, most recent
// first, rejected adaptive candidates with their reason) with its inference endpoint as a ready-to-copy
// curl command and SDK snippet, its adaptive retraining and its own judge.
import { useState } from 'preact/hooks';
import { AdaptiveSection } from '../adaptive.tsx';
import { api } from '../api.ts';
import { JudgeConfig } from '../judge.tsx';
import {
  ConfirmButton,
  CopyButton,
  ErrorBox,
  Json,
  Loading,
  Section,
  Status,
  Table,
  fmtDate,
  fmtNum,
  useAction,
  useResource,
} from '../ui.tsx';

export function ProjectsPage() {
  const list = useResource(() => api('GET', '/projects'));
  const [name, setName] = useState('');
  const act = useAction();
  return (
    <>
      <h1>Projects</h1>
      <Section title="New project">
        <form
          class="row"
          onSubmit={(e) => {
            e.preventDefault();
            void act.run(async () => {
              await api('POST', '/projects', { body: { name } });
              setName('');
              await list.reload();
            });
          }}
        >
          <label>
            Name
            <input
              name="project-name"
              required
              maxLength={200}
              value={name}
              onInput={(e) => setName(e.currentTarget.value)}
            />
          </label>
          <button class="primary" type="submit" disabled={act.busy}>
            Create
          </button>
        </form>
        <ErrorBox error={act.error ?? list.error} />
      </Section>
      <Loading when={list.loading && !list.data} />
      {list.data && (
        <Section title="Projects">
          <Table
            head={['Name', 'Id', 'Active deployment', 'Created']}
            rows={list.data.projects}
            rowKey={(p: any) => p.id}
            cells={(p: any) => [
              <a href={`#/projects/${p.id}`}>{p.name}</a>,
              <code>{p.id}</code>,
              p.active_deployment_id ?? '—',
              fmtDate(p.created_at),
            ]}
            empty="No projects yet."
          />
        </Section>
      )}
      <JudgeConfig path="/judge" title="Team LLM judge" testid="team-judge" />
    </>
  );
}

export function ProjectDetail({ id }: { id: string }) {
  const p = useResource(() => api('GET', `/projects/${id}`), [id]);
  const deps = useResource(() => api('GET', `/projects/${id}/deployments`), [id]);
  const act = useAction();
  const url = `${location.origin}/projects/${id}/inference`;
  const body = '{"text": "Alice moved to Paris.", "schema": {"entities": ["person", "city"]}}';
  const curl = [
    `curl -s ${url} \\`,
    `  -H "X-API-Key: $LOOM_API_KEY" -H "Content-Type: application/json" \\`,
    `  -d '${body}'`,
  ].join('\n');
  const sdk = [
    `const r = await fetch('${url}', {`,
    `  method: 'POST',`,
    `  headers: { 'X-API-Key': process.env.LOOM_API_KEY, 'Content-Type': 'application/json' },`,
    `  body: JSON.stringify(${body}),`,
    `});`,
    `console.log(await r.json());`,
  ].join('\n');
  const settings =
    p.data &&
    Object.fromEntries(
      Object.entries(p.data).filter(
        ([k]) => !['id', 'name', 'created_at', 'active_deployment_id', 'adaptive'].includes(k),
      ),
    );
  return (
    <>
      <p>
        <a href="#/projects">← Projects</a>
      </p>
      <ErrorBox error={p.error ?? deps.error ?? act.error} />
      <Loading when={p.loading && !p.data} />
      {p.data && (
        <Section
          title={p.data.name}
          actions={
            <ConfirmButton
              label="Delete project"
              danger
              question="Delete the project, its deployments and endpoint?"
              onConfirm={() =>
                void act.run(async () => {
                  await api('DELETE', `/projects/${id}`);
                  location.hash = '#/projects';
                })
              }
            />
          }
        >
          <p>
            Inference endpoint: <code>POST {url}</code>
          </p>
          <h3>curl</h3>
          <div class="row">
            <pre class="code grow">{curl}</pre>
            <CopyButton text={curl} />
          </div>
          <h3>JavaScript</h3>
          <div class="row">
            <pre class="code grow">{sdk}</pre>
            <CopyButton text={sdk} />
          </div>
          {settings && Object.keys(settings).length > 0 && (
            <>
              <h3>Settings</h3>
              <Json value={settings} />
            </>
          )}
        </Section>
      )}
      {p.data && <AdaptiveSection projectId={id} onChange={() => void deps.reload()} />}
      {p.data && <JudgeConfig path={`/projects/${id}/judge`} title="Project LLM judge" testid="project-judge" />}
      {deps.data && (
        <Section title="Deployments">
          <Table
            testid="deployments"
            head={['Deployment', 'Training job', 'Status', 'Created', 'Active since', 'Replaced', 'Adaptive decision']}
            rows={deps.data.deployments}
            rowKey={(d: any) => d.deployment_id}
            cells={(d: any) => [
              <code>{d.deployment_id}</code>,
              <a href={`#/training/${d.training_job_id}`}>{d.training_job_id}</a>,
              <>
                <Status value={d.status} />
                {d.error ? ` ${d.error}` : ''}
              </>,
              fmtDate(d.created_at),
              fmtDate(d.activated_at),
              fmtDate(d.replaced_at),
              d.adaptive ? (
                <>
                  {d.adaptive.decision}: F1 {fmtNum(d.adaptive.candidate_f1)} vs {fmtNum(d.adaptive.deployed_f1)}
                  <div class="small muted">{d.adaptive.reason}</div>
                </>
              ) : (
                '—'
              ),
            ]}
            empty="Nothing deployed yet: deploy a completed training job from its page."
          />
        </Section>
      )}
    </>
  );
}
