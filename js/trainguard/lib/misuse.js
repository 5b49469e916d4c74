'use strict';
// What TF.js only logs, watched and named with the user's file:line: tf.tidy() given an async
// function, and errors a step catches and logs. Neither changes what the step does.
//
// tf.tidy(async () => { ... await model.fit(...) }) returns at the first await: tidy ends its
// scope there and disposes every tensor made so far (the data fit is about to use), and TF.js only
// prints "Cannot return a Promise inside of tidy." The rest of the function runs outside any scope,
// and fails on the disposed tensors ("Cannot read properties of undefined (reading 'backend')")
// or, where it does not touch them, keeps whatever it makes. The fix: trainguard.scope(async ...)
// (startScope/endScope around the await), or tf.tidy() around synchronous parts only.

const path = require('path');
const { tfEngine } = require('./memory');

const ASYNC_TIDY = 'async-tidy';
const FIX_ASYNC_TIDY =
  'tf.tidy() cannot wait for a Promise: wrap the async work in trainguard.scope(async () => ...) ' +
  '(tf.engine().startScope() before the await, endScope() after), or use tf.tidy() only around synchronous code';

const records = new Map(); // `${kind}|${site}` -> record
const LIBRARY = /[\\/]node_modules[\\/]@tensorflow[\\/]|[\\/]trainguard[\\/]lib[\\/]|^node:|\(node:|[\\/]internal[\\/]/;

/** The first frame of `stack` in the user's code (not TF.js, not trainguard, not Node's), as file:line:col. */
function userSite(stack) {
  for (const line of String(stack || '').split('\n').slice(1)) {
    const m = line.match(/\(?((?:file:\/\/)?[^\s()]+):(\d+):(\d+)\)?\s*$/);
    if (!m || LIBRARY.test(line)) continue;
    let file = m[1].replace(/^file:\/\//, '');
    const rel = path.relative(process.cwd(), file);
    if (rel && !rel.startsWith('..') && !path.isAbsolute(rel)) file = rel;
    return `${file}:${m[2]}:${m[3]}`;
  }
  return 'unknown location';
}

function errorInfo(err) {
  return {
    type: err && err.name ? String(err.name) : typeof err,
    message: String(err && err.message !== undefined ? err.message : err).split('\n')[0],
    site: userSite(err && err.stack),
  };
}

function record(kind, site) {
  const key = `${kind}|${site}`;
  let rec = records.get(key);
  if (!rec) {
    rec = { kind, site, count: 0, rejected: 0, resolved: 0, error: null };
    records.set(key, rec);
  }
  return rec;
}

/**
 * Watch the engine's tidy() for functions that return a Promise (idempotent; a no-op until TF.js
 * is loaded). Returns whether TF.js's engine is watched.
 */
function watchTidy() {
  const engine = tfEngine();
  if (engine === null || typeof engine.tidy !== 'function') return false;
  if (engine.tidy.trainguardWatched) return true;
  const original = engine.tidy;
  const watched = function tidy(...args) {
    const result = original.apply(this, args);
    if (result && typeof result.then === 'function') {
      const rec = record(ASYNC_TIDY, userSite(new Error().stack));
      rec.count += 1;
      // the step's own await still sees the rejection; this only counts how the async work ended
      result.then(
        () => {
          rec.resolved += 1;
        },
        (err) => {
          rec.rejected += 1;
          rec.error = errorInfo(err);
        },
      );
    }
    return result;
  };
  watched.trainguardWatched = true;
  engine.tidy = watched;
  return true;
}

let consoleWatched = false;

/** Count Error objects a step passes to console.error/warn/log/info: errors it caught and logged. */
function watchConsole() {
  if (consoleWatched) return;
  consoleWatched = true;
  for (const name of ['error', 'warn', 'log', 'info']) {
    const original = console[name];
    console[name] = function logged(...args) {
      const err = args.find((a) => a instanceof Error);
      if (err !== undefined) {
        const info = errorInfo(err);
        const rec = record('logged-error', userSite(new Error().stack)); // where it was logged
        rec.count += 1;
        rec.error = info;
      }
      return original.apply(this, args);
    };
  }
}

/** Failures seen so far: async work of a misused tidy that rejected, and errors a step logged. */
function failures() {
  let n = 0;
  for (const r of records.values()) n += r.kind === ASYNC_TIDY ? r.rejected : r.count;
  return n;
}

/** A copy of every record so far with its text (counts are cumulative: take one before and one after to diff). */
function snapshot() {
  return [...records.values()].map((r) => ({ ...r, error: r.error && { ...r.error }, text: describe(r) }));
}

/** What happened between two snapshots, the records with a count in that span. */
function since(before) {
  const old = new Map(before.map((r) => [`${r.kind}|${r.site}`, r]));
  const out = [];
  for (const r of snapshot()) {
    const o = old.get(`${r.kind}|${r.site}`) || { count: 0, rejected: 0, resolved: 0 };
    const d = { ...r, count: r.count - o.count, rejected: r.rejected - o.rejected, resolved: r.resolved - o.resolved };
    d.text = describe(d);
    if (d.count > 0 || d.rejected > 0 || d.resolved > 0) out.push(d);
  }
  return out;
}

const times = (n) => (n === 1 ? 'once' : `${n} times`);

/** One line for a record: what, where, how often, how it ended, and the fix. */
function describe(r) {
  if (r.kind === ASYNC_TIDY) {
    const failed = r.rejected
      ? `; its async work then failed ${times(r.rejected)}: ${r.error.type}: ${r.error.message}` +
        ' (tidy had already disposed the tensors it made before the first await)'
      : '';
    return (
      `tf.tidy() was given an async function at ${r.site} (${times(r.count)}): it returned a Promise, so tidy ended ` +
      `its scope at the first await and the rest ran outside any scope${failed}. Fix: ${FIX_ASYNC_TIDY}`
    );
  }
  return `the step caught and logged ${r.error.type}: ${r.error.message} (${times(r.count)}, logged at ${r.site})`;
}

module.exports = { watchTidy, watchConsole, snapshot, since, describe, failures, userSite, ASYNC_TIDY, FIX_ASYNC_TIDY };
