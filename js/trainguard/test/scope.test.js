'use strict';
// The scope helper and memory readings against real @tensorflow/tfjs (CPU backend).
const test = require('node:test');
const assert = require('node:assert');
const tf = require('@tensorflow/tfjs');
const tg = require('..');
const seed = require('./fixtures/seed_loop');

tf.setBackend('cpu');

test('memory() reads tf.memory() and process.memoryUsage()', () => {
  const m = tg.memory();
  assert.ok(m.node.rss > 0 && m.node.heapUsed > 0);
  assert.strictEqual(typeof m.tfjs.numTensors, 'number');
  assert.strictEqual(typeof m.tfjs.numBytes, 'number');
});

test('an async step that forgets model.dispose() leaves its weights as survivors', async () => {
  const data = seed.setup();
  const { report } = await tg.scope(() => seed.step_leaky(data));
  const variables = report.survivors.filter((s) => s.kind === 'variable');
  // Dense(64 -> 32) and Dense(32 -> 1): kernel and bias each
  assert.deepStrictEqual(
    variables.map((s) => `${s.dtype}[${s.shape.join(',')}]`).sort(),
    ['float32[1]', 'float32[32,1]', 'float32[32]', 'float32[64,32]'],
  );
  assert.strictEqual(variables.reduce((s, g) => s + g.bytes, 0), (64 * 32 + 32 + 32 + 1) * 4);
  // the data it generated and forgot was created inside the scope: disposed, not a survivor; the
  // weights (variables) and the optimizer's tf.keep()-ed learning rate outlive it
  assert.ok(!report.survivors.some((s) => s.shape.join(',') === '1024,64'));
  assert.deepStrictEqual(report.survivors.filter((s) => s.kind === 'tensor').map((s) => s.shape), [[]]);
  assert.strictEqual(report.tensorDelta, 5);
  assert.match(report.toText(), /survivors: \d+ tensors/);
});

test('the disposed step leaves nothing; temporaries created inside are disposed by the scope', async () => {
  const data = seed.setup();
  await seed.step_disposed(data); // first fit creates lasting backend state; not the step's
  const before = tf.memory().numTensors;
  const { report } = await tg.scope(async () => {
    await seed.step_disposed(data);
    tf.randomNormal([100, 100]); // never disposed by the step: the scope does it
  });
  assert.strictEqual(report.survivorCount, 0, JSON.stringify(report.survivors));
  assert.strictEqual(tf.memory().numTensors, before);
});

test('what the step returns or names in keep is not a survivor and stays alive', async () => {
  const kept = tf.tensor([1, 2, 3]);
  const { value, report } = await tg.scope(async () => {
    const t = tf.ones([2, 2]);
    await new Promise((resolve) => setTimeout(resolve, 5)); // async: tf.tidy could not span this
    return { t };
  }, { keep: [kept] });
  assert.strictEqual(report.survivorCount, 0);
  assert.ok(!value.t.isDisposed);
  assert.deepStrictEqual(Array.from(value.t.dataSync()), [1, 1, 1, 1]);
  tf.dispose([kept, value.t]);
});

test('maxSurvivorBytes throws LeakError with the report; disposeVariables cleans up', async () => {
  const data = seed.setup();
  await assert.rejects(
    tg.scope(() => seed.step_leaky(data), { maxSurvivorBytes: 100 }),
    (err) => err instanceof tg.LeakError && /survived the scope, over maxSurvivorBytes/.test(err.message) && err.report.survivorBytes > 100,
  );
  const { report } = await tg.scope(() => seed.step_leaky(data), { disposeVariables: true });
  assert.strictEqual(report.survivors.filter((s) => s.kind === 'variable').length, 0);
});

test('a step that throws still ends its scope and rethrows', async () => {
  const depth = tf.engine().state.scopeStack.length;
  await assert.rejects(tg.scope(async () => {
    tf.zeros([10]);
    throw new Error('boom');
  }), /boom/);
  assert.strictEqual(tf.engine().state.scopeStack.length, depth);
});

test('bad options are refused in one line', async () => {
  await assert.rejects(tg.scope(() => 1, { maxSurvivorBytes: -1 }), /maxSurvivorBytes=-1 must be a number/);
  await assert.rejects(tg.scope('not a function'), /fn must be a function/);
});
