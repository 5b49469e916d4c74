'use strict';
// trainguard for TensorFlow.js and Node: memory scopes that report survivors, tf.memory() and
// process.memoryUsage() readings, and the helpers a command trial uses to read its params and
// print its result. No runtime dependencies; TF.js is found when the program has loaded it.

const fs = require('fs');
const { scope, LeakError, formatBytes } = require('./lib/scope');
const { tfMemory, nodeMemory, memory } = require('./lib/memory');

/** The line prefix trainguard reads a command trial's result from (the last such line wins). */
const RESULT_PREFIX = 'TRAINGUARD_RESULT ';
/** The environment variable naming the JSON file that holds a command trial's params. */
const PARAMS_FILE_ENV = 'TRAINGUARD_PARAMS_FILE';

/** A command trial's params: from the file named in TRAINGUARD_PARAMS_FILE (also on stdin). */
function params() {
  const file = process.env[PARAMS_FILE_ENV];
  if (!file) {
    throw new Error(`${PARAMS_FILE_ENV} is not set: params() works in a program that trainguard runs as a command trial`);
  }
  return JSON.parse(fs.readFileSync(file, 'utf8'));
}

/** Print a command trial's result line: `TRAINGUARD_RESULT <json>`. */
function result(value) {
  process.stdout.write(RESULT_PREFIX + JSON.stringify(value === undefined ? null : value) + '\n');
}

module.exports = { scope, LeakError, memory, tfMemory, nodeMemory, formatBytes, params, result, RESULT_PREFIX, PARAMS_FILE_ENV };
