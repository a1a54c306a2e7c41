// `loom admin <subcommand>`: accounts, keys, credits and plans, working directly on the store under
// LOOM_DATA_DIR (default ./data); safe while the server runs (LMDB is multi-process). It must be the
// server's store (a key made in another one gets 401), so the path in use is printed (stderr) on
// every run, and a missing store is refused unless --create-store asks for a new one.
import { parseArgs } from 'node:util';
import { openStore, type Store, storeExists, storePath } from '../store/index.ts';
import { copyStore } from '../store/copy.ts';
import { createAuthService } from '../service/auth.ts';
import { createBillingService } from '../service/billing.ts';
import { configFromEnv } from '../service/config.ts';
import { ServiceError } from '../service/errors.ts';

const USAGE = `usage: loom admin <subcommand> [options] [--create-store]
  store: $LOOM_DATA_DIR/store (default ./data/store), the server's: \`npm start\` prints its data folder.
  A missing store is an error; --create-store creates a new, empty one there.

  create-user   --email E --password P [--team-id T | --team-name N] [--plan free|pro|scale] [--region CC] [--key NAME]
  create-key    --email E [--name N]                 print a new API key (shown once)
  grant-credits (--email E | --team-id T) --credits N
  set-plan      (--email E | --team-id T) --plan P [--card | --no-card] [--overage on|off]
  block         (--email E | --team-id T)            every key of the team gets 401
  unblock       (--email E | --team-id T)
  set-region    (--email E | --team-id T) --region CC (or --region none)
  show          (--email E | --team-id T)            plan, credits and keys
  migrate-store --to postgres://...                 copy the LMDB store under LOOM_DATA_DIR into an empty
                                                    PostgreSQL database (stop the servers first)`;

const OPTIONS = {
  email: { type: 'string' }, password: { type: 'string' }, 'team-id': { type: 'string' }, 'team-name': { type: 'string' },
  plan: { type: 'string' }, region: { type: 'string' }, key: { type: 'string' }, name: { type: 'string' }, credits: { type: 'string' },
  card: { type: 'boolean' }, 'no-card': { type: 'boolean' }, overage: { type: 'string' }, help: { type: 'boolean', short: 'h' },
  json: { type: 'boolean' }, 'create-store': { type: 'boolean' }, to: { type: 'string' },
} as const;

/** `migrate-store --to URL`: the LMDB store under dataDir into the empty PostgreSQL store at URL */
async function migrateStore(dataDir: string, to: string | undefined): Promise<number> {
  if (!to || !/^postgres(ql)?:\/\//.test(to)) {
    console.error('loom admin migrate-store: --to postgres://user:password@host:5432/db is required');
    return 1;
  }
  if (!storeExists(dataDir)) {
    console.error(`loom admin migrate-store: no LMDB store at ${storePath(dataDir)} (set LOOM_DATA_DIR)`);
    return 1;
  }
  const target = new URL(to);
  console.error(`loom admin migrate-store: ${storePath(dataDir)} -> PostgreSQL ${target.host}${target.pathname}`);
  const from = await openStore(dataDir);
  let into: Store | null = null;
  try {
    into = await openStore(dataDir, { databaseUrl: to, poolSize: 2 });
    const counts = await copyStore(from.db, into.db, (t, n) => { if (n % 5000 === 0) console.error(`  ${t}: ${n}`); });
    console.log(JSON.stringify({ copied: counts }, null, 2));
    return 0;
  } catch (e) {
    console.error(`loom admin migrate-store: ${(e as Error).message}`);
    return 1;
  } finally {
    await into?.close();
    await from.close();
  }
}

async function teamOf(store: Store, v: { email?: string; 'team-id'?: string }): Promise<string> {
  if (v['team-id']) return v['team-id'];
  if (!v.email) throw new Error('--email or --team-id is required');
  const u = await store.users.byEmail(v.email);
  if (!u) throw new Error(`no user ${v.email}`);
  return u.team_id;
}

export async function main(argv: string[]): Promise<number> {
  const [sub, ...rest] = argv;
  if (!sub || sub === 'help' || sub.startsWith('-')) { console.log(USAGE); return sub ? 0 : 1; }
  const { values: v } = parseArgs({ args: rest, options: OPTIONS, allowPositionals: false });
  if (v.help) { console.log(USAGE); return 0; }
  const config = configFromEnv();
  if (sub === 'migrate-store') return migrateStore(config.dataDir, v.to);
  const pgUrl = config.databaseUrl;
  const where = pgUrl ? `PostgreSQL ${new URL(pgUrl).host}${new URL(pgUrl).pathname}` : storePath(config.dataDir);
  const source = pgUrl ? 'LOOM_DATABASE_URL'
    : process.env.LOOM_DATA_DIR ? 'LOOM_DATA_DIR' : 'default ./data: LOOM_DATA_DIR is not set';
  if (!pgUrl && !storeExists(config.dataDir) && !v['create-store']) {
    console.error(`loom admin: no store at ${where} (${source}).
  Point LOOM_DATA_DIR at the server's data folder (\`npm start\` prints it as "data:"), e.g.
    LOOM_DATA_DIR=/path/to/data npx loom admin ${sub} ...
  or pass --create-store to create a new, empty store there (the server must then use the same LOOM_DATA_DIR).`);
    return 1;
  }
  console.error(`loom admin: store ${where} (${source})`);
  const store = await openStore(config.dataDir, { databaseUrl: pgUrl, poolSize: 2 });
  const billing = createBillingService(store, config);
  const auth = createAuthService(store, config, billing);
  const out = (o: unknown) => console.log(JSON.stringify(o, null, 2));
  try {
    switch (sub) {
      case 'create-user': {
        if (!v.email || !v.password) throw new Error('--email and --password are required');
        const { user, team } = await auth.createUser({ email: v.email, password: v.password, team_id: v['team-id'], team_name: v['team-name'], plan: v.plan, region: v.region });
        const res: Record<string, unknown> = { user_id: user.id, email: user.email, team_id: team.id, plan: (await billing.view(team.id)).plan };
        if (v.key) {
          const k = await auth.createKeyForUser(user.id, v.key);
          res.api_key = k.secret_key;
          res.note = 'the API key is shown only once';
        }
        out(res);
        break;
      }
      case 'create-key': {
        if (!v.email) throw new Error('--email is required');
        const u = await store.users.byEmail(v.email);
        if (!u) throw new Error(`no user ${v.email}`);
        const k = await auth.createKeyForUser(u.id, v.name ?? 'cli');
        out({ id: k.id, name: k.name, secret_key: k.secret_key, api_key_last_digits: k.api_key_last_digits, team_id: k.team_id, note: 'the key is shown only once' });
        break;
      }
      case 'grant-credits': {
        const credits = Number(v.credits);
        if (!v.credits || !Number.isFinite(credits)) throw new Error('--credits N is required');
        out(await billing.grant(await teamOf(store, v), credits));
        break;
      }
      case 'set-plan': {
        if (!v.plan) throw new Error('--plan is required');
        const card = v.card ? true : v['no-card'] ? false : undefined;
        const overage = v.overage === undefined ? undefined : v.overage === 'on';
        out(await billing.setPlan(await teamOf(store, v), v.plan, { card_on_file: card, overage_enabled: overage }));
        break;
      }
      case 'block': case 'unblock': {
        const t = await teamOf(store, v);
        await auth.setTeamBlocked(t, sub === 'block');
        out({ team_id: t, blocked: sub === 'block' });
        break;
      }
      case 'set-region': {
        if (!v.region) throw new Error('--region is required');
        const t = await teamOf(store, v);
        await auth.setTeamRegion(t, v.region === 'none' ? null : v.region);
        out({ team_id: t, region: (await store.teams.get(t))?.region ?? null });
        break;
      }
      case 'show': {
        const t = await teamOf(store, v);
        const team = await store.teams.get(t);
        if (!team) throw new Error(`no team ${t}`);
        out({ team, account: await billing.view(t), keys: (await store.keys.listByTeam(t)).map((k) => ({ id: k.id, name: k.name, api_key_last_digits: k.last_digits, revoked_at: k.revoked_at, request_count: k.request_count, usage_cost: k.usage_cost_micro / 1e6 })) });
        break;
      }
      default:
        console.error(`loom admin: unknown subcommand ${sub}\n${USAGE}`);
        return 2;
    }
    return 0;
  } catch (e) {
    console.error(`loom admin ${sub}: ${e instanceof ServiceError || e instanceof Error ? e.message : String(e)}`);
    return 1;
  } finally {
    await store.close();
  }
}
