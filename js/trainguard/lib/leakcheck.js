#!/usr/bin/env node
'use strict';
// The Node side of `trainguard leakcheck train.js:step --setup setup`:
//   node --expose-gc lib/leakcheck.js OUT_FD FILE STEP [SETUP]
// loads FILE, calls SETUP once, then does what trainguard's leak loop asks, one JSON line per
// command on stdin, one JSON line per event on OUT_FD (the user's own console output keeps
// stdout and stderr, so it can never corrupt the protocol):
//
//   {"op":"calls","n":k}  ->  {"event":"done","iterations":total,"step_times":[last <= 50 s],"misuse":[...]}
//                             or {"event":"step_error","iteration","type","message","stack","misuse"}
//                             misuse: lib/misuse.js's records so far (cumulative): tf.tidy() given an
//                             async function, Error objects the step caught and logged;
//                             failed_calls: calls in which one of those failed or was logged
//   {"op":"read"}         ->  {"event":"reading", iteration, heap_used, heap_total, external,
//                              array_buffers, rss, tf_num_tensors, tf_num_bytes, ..., gc_s}
//                             taken after global.gc()
//   {"op":"exit"}         ->  exits
//
// At start: {"event":"ready","pid","node","tfjs","setup_s"} or {"event":"error","where","type","message"}.

const readline = require('readline');
const { loadModule, pick, firstLine } = require('./load');
const { tfMemory, tfVersion } = require('./memory');
const misuse = require('./misuse');

require('./quiet').install();

const outFd = Number(process.argv[2]);
const [file, stepName, setupName] = process.argv.slice(3);
const fs = require('fs');

function emit(event) {
  fs.writeSync(outFd, JSON.stringify(event) + '\n');
}

const nextTick = () => new Promise((resolve) => setImmediate(resolve));

async function collect() {
  // two collections around a turn of the event loop: the first frees what is unreachable, the
  // turn lets finalizers (FinalizationRegistry, native buffers) run, the second frees what they let go
  global.gc();
  await nextTick();
  global.gc();
}

async function main() {
  if (typeof global.gc !== 'function') {
    emit({ event: 'error', where: 'start', type: 'UsageError', message: 'node was started without --expose-gc' });
    process.exit(2);
  }
  let step;
  let setup = null;
  let where = 'load';
  let setupValue;
  let setupS = 0;
  try {
    const mod = await loadModule(file);
    step = pick(mod, file, stepName, 'step');
    if (setupName) {
      try {
        setup = pick(mod, file, setupName, 'setup');
      } catch (err) {
        // `--setup setup` is passed to every file alike: a file without one runs its step alone
        if (setupName !== 'setup') throw err;
        process.stderr.write(`trainguard leakcheck: warning: ${file} has no function "setup"; running the step without setup\n`);
      }
    }
    where = 'setup';
    const t0 = process.hrtime.bigint();
    if (setup) setupValue = await setup();
    setupS = Number(process.hrtime.bigint() - t0) / 1e9;
  } catch (err) {
    emit({
      event: 'error',
      where,
      type: err && err.name ? err.name : 'Error',
      message: where === 'setup' ? `setup() threw ${err && err.name ? err.name : 'an error'}: ${firstLine(err)}` : firstLine(err),
      stack: String(err && err.stack ? err.stack : err),
    });
    process.exit(2);
  }
  misuse.watchConsole();
  await collect();
  emit({ event: 'ready', pid: process.pid, node: process.version, tfjs: tfVersion(), setup_s: setupS });

  let iterations = 0;
  let failedCalls = 0;
  const call = () => step(setupValue);
  const handle = async (cmd) => {
    if (cmd.op === 'calls') {
      misuse.watchTidy(); // TF.js may be loaded by the step itself, not at the file's top
      const times = [];
      for (let i = 0; i < cmd.n; i++) {
        const t0 = process.hrtime.bigint();
        const failedBefore = misuse.failures();
        try {
          const out = call();
          if (out && typeof out.then === 'function') await out;
          if (misuse.failures() > failedBefore) failedCalls += 1;
        } catch (err) {
          emit({
            event: 'step_error',
            iteration: iterations + 1,
            type: err && err.name ? err.name : typeof err,
            message: firstLine(err),
            stack: String(err && err.stack ? err.stack : err),
            step_times: times.slice(-50),
            misuse: misuse.snapshot(),
            failed_calls: failedCalls,
          });
          return;
        }
        times.push(Number(process.hrtime.bigint() - t0) / 1e9);
        iterations += 1;
      }
      emit({ event: 'done', iterations, step_times: times.slice(-50), misuse: misuse.snapshot(), failed_calls: failedCalls });
    } else if (cmd.op === 'read') {
      const t0 = process.hrtime.bigint();
      await collect();
      const gcS = Number(process.hrtime.bigint() - t0) / 1e9;
      const m = process.memoryUsage();
      const tf = tfMemory();
      const row = {
        event: 'reading',
        iteration: iterations,
        rss: m.rss,
        heap_used: m.heapUsed,
        heap_total: m.heapTotal,
        external: m.external,
        array_buffers: m.arrayBuffers,
        gc_s: gcS,
      };
      if (tf) {
        row.tf_num_tensors = tf.numTensors;
        row.tf_num_bytes = tf.numBytes;
        row.tf_num_data_buffers = tf.numDataBuffers;
        row.tf_unreliable = tf.unreliable;
        if (tf.numVariables !== undefined) row.tf_num_variables = tf.numVariables;
      }
      emit(row);
    } else if (cmd.op === 'exit') {
      process.exit(0);
    }
  };
  let chain = Promise.resolve();
  const rl = readline.createInterface({ input: process.stdin });
  rl.on('line', (line) => {
    if (!line.trim()) return;
    const cmd = JSON.parse(line);
    chain = chain.then(() => handle(cmd));
  });
  rl.on('close', () => chain.then(() => process.exit(0)));
}

process.on('unhandledRejection', (err) => {
  process.stderr.write(`trainguard leakcheck: unhandled rejection in the step: ${err && err.stack ? err.stack : err}\n`);
});

main();
