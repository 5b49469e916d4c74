'use strict';
// Loading the user's file and function ("train.js:train"), CommonJS or ES module.

const fs = require('fs');
const path = require('path');
const url = require('url');

class UsageError extends Error {
  constructor(message) {
    super(message);
    this.name = 'UsageError';
  }
}

function firstLine(err) {
  const text = err && err.message !== undefined ? String(err.message) : String(err);
  return text.split('\n')[0];
}

async function loadModule(file) {
  const abs = path.resolve(file);
  if (!fs.existsSync(abs) || !fs.statSync(abs).isFile()) {
    throw new UsageError(`${file}: no such file: give the path of a JavaScript file, e.g. train.js:train`);
  }
  if (!/\.(c|m)?js$/.test(abs)) {
    throw new UsageError(`${file}: not a .js, .mjs or .cjs file: give a JavaScript file, e.g. train.js:train`);
  }
  try {
    if (abs.endsWith('.mjs')) return await import(url.pathToFileURL(abs).href);
    try {
      return require(abs);
    } catch (err) {
      if (err && err.code === 'ERR_REQUIRE_ESM') return await import(url.pathToFileURL(abs).href);
      throw err;
    }
  } catch (err) {
    if (err instanceof UsageError) throw err;
    const wrapped = new UsageError(`${file}: loading it threw ${err && err.name ? err.name : 'an error'}: ${firstLine(err)}`);
    wrapped.stack = err && err.stack ? String(err.stack) : wrapped.stack;
    throw wrapped;
  }
}

function exportedFunctions(mod) {
  const names = new Set();
  for (const source of [mod, mod && mod.default]) {
    if (source && (typeof source === 'object' || typeof source === 'function')) {
      for (const [k, v] of Object.entries(source)) if (typeof v === 'function') names.add(k);
    }
  }
  return [...names].sort();
}

function pick(mod, file, name, role) {
  let fn = mod[name];
  if (fn === undefined && mod.default && typeof mod.default === 'object') fn = mod.default[name];
  if (fn === undefined) {
    const have = exportedFunctions(mod);
    throw new UsageError(
      `${file} exports no ${role} ${JSON.stringify(name)}` + (have.length ? ` (it exports: ${have.slice(0, 10).join(', ')})` : ' (it exports no functions: add module.exports = { ' + name + ' })'),
    );
  }
  if (typeof fn !== 'function') {
    throw new UsageError(`${file}: ${JSON.stringify(name)} is a ${typeof fn}, not a function: name a function as the ${role}`);
  }
  return fn;
}

/** Split "path/train.js:fn" at its last colon. */
function splitRef(ref) {
  const at = ref.lastIndexOf(':');
  if (at <= 0 || at === ref.length - 1) {
    throw new UsageError(`${JSON.stringify(ref)} must be FILE:FUNCTION, e.g. train.js:train`);
  }
  return [ref.slice(0, at), ref.slice(at + 1)];
}

/** Load FILE:FUNCTION and return the function. */
async function loadFunction(ref, role = 'function') {
  const [file, name] = splitRef(ref);
  const mod = await loadModule(file);
  return pick(mod, file, name, role);
}

module.exports = { UsageError, loadModule, loadFunction, pick, splitRef, firstLine };
