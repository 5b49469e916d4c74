'use strict';
// scope()'s report names tf.tidy() given an async function: where (the user's file:line), how its
// async work ended, and the fix. Real @tensorflow/tfjs (CPU backend).
const test = require('node:test');
const assert = require('node:assert');
const tf = require('@tensorflow/tfjs');
const tg = require('..');
const fixture = require('./fixtures/async_tidy');

tf.setBackend('cpu');

test('the source document pattern: scope() reports the async tidy, its site, its failure and the fix', async () => {
  const quiet = console.error;
  console.error = () => {}; // the fixture logs the error it catches, and TF.js its own line
  let report;
  try {
    ({ report } = await tg.scope(() => fixture.step_async_tidy_caught()));
  } finally {
    console.error = quiet;
  }
  assert.strictEqual(report.misuse.length, 1, JSON.stringify(report.misuse));
  const m = report.misuse[0];
  assert.strictEqual(m.kind, 'async-tidy');
  assert.match(m.site, /test[\\/]fixtures[\\/]async_tidy\.js:34:\d+$/);
  assert.strictEqual(m.count, 1);
  assert.strictEqual(m.rejected, 1);
  assert.match(m.error.message, /reading 'backend'/);
  const text = report.toText();
  assert.match(text, /misuse: tf\.tidy\(\) was given an async function at .*async_tidy\.js:34/);
  assert.match(text, /trainguard\.scope\(async \(\) => \.\.\.\)/);
});

test('when the step throws, its error carries the scope report that names the misuse', async () => {
  const quiet = console.error;
  console.error = () => {};
  try {
    await assert.rejects(tg.scope(() => fixture.step_async_tidy()), (err) => {
      assert.match(err.message, /reading 'backend'/); // the step's own error, unchanged
      assert.strictEqual(err.trainguardReport.misuse[0].kind, 'async-tidy');
      assert.match(err.trainguardReport.misuse[0].site, /async_tidy\.js:28:\d+$/);
      return true;
    });
  } finally {
    console.error = quiet;
  }
});

test('the fix (scope around the async work) reports no misuse', async () => {
  const { report } = await tg.scope(() => fixture.step_scoped());
  assert.deepStrictEqual(report.misuse, []);
  assert.doesNotMatch(report.toText(), /misuse/);
});
