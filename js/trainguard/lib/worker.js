#!/usr/bin/env node
'use strict';
// A trainguard worker in Node: `node lib/worker.js READ_FD WRITE_FD`, started by trainguard's
// supervisor for `trainguard run train.js:train`. It speaks the Python worker's protocol
// (trainguard/runner/_protocol.py): length-prefixed JSON messages both ways.
//
// supervisor -> worker: {"op":"fn","key","kind":"node","payload":"/abs/train.js:train"},
//                       {"op":"trial","index","attempt","key","params"}, {"op":"exit"}
// worker -> supervisor: {"op":"ready","pid","preload_s","frameworks"}, {"op":"fatal","message"},
//                       {"op":"fn_ok","key"} | {"op":"fn_error","key","message","traceback"},
//                       {"op":"result","index","attempt","status","value_json","error","duration_s",
//                        "rss_bytes","hwm_bytes","stats":{"frameworks","tfjs","node"}}
// At each trial boundary the result carries tf.memory() (when TF.js is loaded) and
// process.memoryUsage(); the supervisor stores both with the trial.

const { readMessages, writeMessage } = require('./frames');
const { loadFunction, firstLine } = require('./load');
const { tfMemory, nodeMemory, procStatusBytes, resetPeak } = require('./memory');

require('./quiet').install();

const CONFIG_ENV = 'TRAINGUARD_WORKER_CONFIG';

function dieWithParent(parentPid) {
  if (process.ppid !== parentPid) process.exit(70);
  setInterval(() => {
    if (process.ppid !== parentPid) process.exit(70);
  }, 500).unref();
}

function isOutOfMemory(err) {
  if (!(err instanceof RangeError)) return false;
  return /allocation failed|Array buffer allocation|Invalid typed array length|out of memory/i.test(String(err.message));
}

function errorOf(err, status) {
  const name = err && err.name ? err.name : typeof err;
  const message = err && err.message !== undefined ? String(err.message) : String(err);
  return {
    status,
    type: `js.${name}`,
    message: `${name}: ${message}`.slice(0, 2000),
    traceback: (err && err.stack ? String(err.stack) : message).slice(-20000),
    ...(status === 'framework_oom' ? { framework: 'node' } : {}),
  };
}

async function runTrial(fn, msg, maxResultBytes) {
  resetPeak();
  const started = process.hrtime.bigint();
  let status = 'ok';
  let error = null;
  let valueJson = null;
  let value;
  try {
    value = await fn(msg.params);
  } catch (err) {
    status = isOutOfMemory(err) ? 'framework_oom' : 'exception';
    error = errorOf(err, status);
  }
  if (status === 'ok') {
    let text = null;
    try {
      text = JSON.stringify(value === undefined ? null : value);
    } catch (err) {
      status = 'not_serializable';
      error = { status, type: `js.${err.name}`, message: `the result is not JSON-serializable: ${firstLine(err)}; return plain numbers, strings, arrays and objects` };
    }
    const size = text === null ? 0 : Buffer.byteLength(text, 'utf8');
    if (text !== null && maxResultBytes && size > maxResultBytes) {
      status = 'result_too_large';
      error = {
        status,
        type: 'ResultTooLarge',
        message:
          `the result is ${size} bytes of JSON, over max_result_bytes=${maxResultBytes}: ` +
          'return a summary (write large outputs to a file and return its path), or raise max_result_bytes',
      };
    } else if (text !== null) {
      valueJson = text;
    }
  }
  value = undefined;
  const duration = Number(process.hrtime.bigint() - started) / 1e9;
  const tf = tfMemory();
  const node = nodeMemory();
  const stats = { frameworks: tf ? ['tfjs'] : [], node };
  if (tf) stats.tfjs = tf;
  return {
    op: 'result',
    index: msg.index,
    attempt: msg.attempt,
    status,
    value_json: valueJson,
    error,
    duration_s: duration,
    rss_bytes: procStatusBytes('VmRSS') || node.rss,
    hwm_bytes: procStatusBytes('VmHWM'),
    stats,
  };
}

function main() {
  const readFd = Number(process.argv[2]);
  const writeFd = Number(process.argv[3]);
  const config = JSON.parse(process.env[CONFIG_ENV] || '{}');
  delete process.env[CONFIG_ENV];
  dieWithParent(Number(config.parent_pid || process.ppid));
  const maxResultBytes = config.max_result_bytes || null;
  // the cgroup the supervisor made for this worker's tree: every process it starts stays a member
  const tree = { cgroup: false, subreaper: false };
  if (config.cgroup) {
    try {
      require('fs').writeFileSync(`${config.cgroup}/cgroup.procs`, String(process.pid));
      tree.cgroup = true;
    } catch (err) {
      // the supervisor then tracks the tree by its process group and parent links
    }
  }
  const started = process.hrtime.bigint();
  writeMessage(writeFd, {
    op: 'ready',
    pid: process.pid,
    preload_s: Number(process.hrtime.bigint() - started) / 1e9,
    frameworks: tfMemory() ? ['tfjs'] : [],
    tree,
  });
  const functions = new Map();
  let chain = Promise.resolve();
  const handle = async (msg) => {
    if (msg.op === 'fn') {
      try {
        functions.set(msg.key, await loadFunction(msg.payload, 'function'));
        writeMessage(writeFd, { op: 'fn_ok', key: msg.key });
      } catch (err) {
        writeMessage(writeFd, { op: 'fn_error', key: msg.key, message: firstLine(err), traceback: String(err && err.stack ? err.stack : err) });
      }
    } else if (msg.op === 'trial') {
      writeMessage(writeFd, await runTrial(functions.get(msg.key), msg, maxResultBytes));
    } else if (msg.op === 'exit') {
      process.exit(0);
    }
  };
  readMessages(
    readFd,
    (msg) => {
      chain = chain.then(() => handle(msg));
    },
    () => process.exit(0),
  );
}

// a trial's stray promise rejection must not end the worker; the trial that awaited it failed already
process.on('unhandledRejection', (err) => {
  process.stderr.write(`trainguard worker: unhandled rejection: ${err && err.stack ? err.stack : err}\n`);
});

main();
