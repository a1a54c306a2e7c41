// LOOM_ROLE / `loom serve --role`: which parts of Loom a process runs (docs/deploy.md)
import t from 'tap';
import { configFromEnv, parseRoles } from '../../src/service/config.ts';
import { main } from '../../src/cli/serve.ts';

t.test('roles: default all, comma lists, unknown refused', async (t) => {
  t.same([...parseRoles(undefined)].sort(), ['api', 'inference', 'worker']);
  t.same([...parseRoles('all')].sort(), ['api', 'inference', 'worker']);
  t.same([...parseRoles(' api , worker ')].sort(), ['api', 'worker']);
  t.same([...configFromEnv({ LOOM_ROLE: 'inference' }).roles], ['inference']);
  t.same([...configFromEnv({}).roles].sort(), ['api', 'inference', 'worker']);
  t.throws(() => parseRoles('apis'), /unknown role 'apis'/);
  t.throws(() => parseRoles(','), /no role given/);
});

t.test('loom serve refuses an unknown role before starting anything', async (t) => {
  const errs: string[] = [];
  const orig = console.error;
  console.error = (m: string) => errs.push(m);
  try {
    t.equal(await main(['--role', 'gpu']), 2);
    t.equal(await main(['--bogus']), 2);
  } finally {
    console.error = orig;
  }
  t.match(errs[0], /unknown role 'gpu'/);
  t.equal(process.env.LOOM_ROLE, undefined);
});
