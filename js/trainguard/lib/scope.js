'use strict';
// scope(): an async training step between tf.engine().startScope() and endScope(), which
// tf.tidy() cannot do for async code, with a report of what survived it. The JS counterpart of
// Python's trainguard.scope().

const { tfEngine, tfMemory, nodeMemory } = require('./memory');
const misuse = require('./misuse');

class LeakError extends Error {
  constructor(message, report) {
    super(message);
    this.name = 'LeakError';
    this.report = report;
  }
}

function bytesOf(t) {
  if (t.dtype === 'string' || t.dtype === 'complex64') return 0;
  const per = { float32: 4, int32: 4, bool: 1 }[t.dtype] ?? 4;
  return t.size * per;
}

function formatBytes(n) {
  const sign = n < 0 ? '-' : '';
  let v = Math.abs(n);
  for (const unit of ['B', 'KiB', 'MiB', 'GiB']) {
    if (v < 1024 || unit === 'GiB') return `${sign}${unit === 'B' ? v : v.toFixed(1)} ${unit}`;
    v /= 1024;
  }
  return `${n} B`;
}

function tensorsIn(value, out = new Set(), seen = new Set()) {
  if (value === null || typeof value !== 'object' || seen.has(value)) return out;
  seen.add(value);
  if (typeof value.dataId === 'object' && typeof value.dispose === 'function' && 'shape' in value) {
    out.add(value);
    return out;
  }
  if (Array.isArray(value)) {
    for (const v of value) tensorsIn(v, out, seen);
  } else if (Object.getPrototypeOf(value) === Object.prototype) {
    for (const v of Object.values(value)) tensorsIn(v, out, seen);
  } else if (Array.isArray(value.weights)) {
    // a tf.LayersModel or layer named in keep: its weights' variables
    for (const w of value.weights) tensorsIn(w && w.val !== undefined ? w.val : w, out, seen);
  }
  return out;
}

function validateLimit(name, value) {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) {
    throw new TypeError(`${name}=${JSON.stringify(value)} must be a number of bytes or tensors >= 0, e.g. 50e6`);
  }
  return value;
}

/**
 * Run `fn` (sync or async) in its own TF.js memory scope.
 *
 * Tensors created while `fn` runs are disposed when it ends, except what it returns, what
 * `options.keep` or tf.keep() names, and variables (model weights): those are the survivors,
 * reported by (kind, dtype, shape) with counts and bytes. Without TF.js loaded, `fn` runs and only
 * process memory is reported.
 *
 * @param {Function} fn the step; its return value is kept and returned.
 * @param {object} [options]
 * @param {Array|object} [options.keep] tensors created inside that are meant to outlive the scope.
 * @param {boolean} [options.disposeVariables=false] also dispose variables created inside (models
 *   built and trained inside and never used again).
 * @param {number} [options.maxSurvivorBytes] throw LeakError when survivors hold more bytes.
 * @param {number} [options.maxSurvivors] throw LeakError when more tensors survive.
 * @returns {Promise<{value: any, report: object}>}
 */
async function scope(fn, options = {}) {
  if (typeof fn !== 'function') throw new TypeError(`scope(fn): fn must be a function, got ${typeof fn}`);
  const maxBytes = validateLimit('maxSurvivorBytes', options.maxSurvivorBytes);
  const maxCount = validateLimit('maxSurvivors', options.maxSurvivors);
  const engine = tfEngine();
  misuse.watchTidy();
  const misuseBefore = misuse.snapshot();
  const nodeBefore = nodeMemory();
  const tfBefore = tfMemory();
  const varsBefore = engine ? new Set(Object.keys(engine.state.registeredVariables)) : new Set();
  const started = process.hrtime.bigint();
  let tracked = [];
  let keepIds = new Set();
  let value;
  let failed = null;
  let ended = false;
  if (engine) engine.startScope(options.name || 'trainguard.scope');
  const scopeObj = engine ? engine.state.activeScope : null;
  try {
    value = await fn();
  } catch (err) {
    failed = err;
  } finally {
    if (engine) {
      // end only the scope we started, even if the step left inner scopes open
      while (engine.state.activeScope && engine.state.activeScope !== scopeObj) engine.endScope();
      if (engine.state.activeScope === scopeObj) {
        tracked = scopeObj.track.slice();
        const keep = [...tensorsIn(options.keep), ...tensorsIn(failed ? undefined : value)];
        keepIds = new Set(keep.map((t) => t.id));
        engine.endScope(keep);
        ended = true;
      }
      if (options.disposeVariables) {
        for (const [name, v] of Object.entries(engine.state.registeredVariables)) {
          if (!varsBefore.has(name)) v.dispose();
        }
      }
    }
  }
  const groups = new Map();
  const add = (kind, t) => {
    const key = `${kind}|${t.dtype}|${JSON.stringify(t.shape)}`;
    const g = groups.get(key) || { kind, dtype: t.dtype, shape: t.shape.slice(), count: 0, bytes: 0 };
    g.count += 1;
    g.bytes += bytesOf(t);
    groups.set(key, g);
  };
  if (engine) {
    const seen = new Set();
    for (const t of tracked) {
      // what the step returns or names in keep is meant to outlive it, as tf.tidy's return value
      if (!t.isDisposed && !seen.has(t.id) && !keepIds.has(t.id)) {
        seen.add(t.id);
        add('tensor', t);
      }
    }
    for (const [name, v] of Object.entries(engine.state.registeredVariables)) {
      if (!varsBefore.has(name) && !v.isDisposed && !keepIds.has(v.id)) add('variable', v);
    }
  }
  const survivors = [...groups.values()].sort((a, b) => b.bytes - a.bytes);
  const tfAfter = tfMemory();
  const nodeAfter = nodeMemory();
  const report = {
    tfjs: engine !== null,
    ended,
    durationMs: Number(process.hrtime.bigint() - started) / 1e6,
    numTensorsBefore: tfBefore ? tfBefore.numTensors : null,
    numTensorsAfter: tfAfter ? tfAfter.numTensors : null,
    numBytesBefore: tfBefore ? tfBefore.numBytes : null,
    numBytesAfter: tfAfter ? tfAfter.numBytes : null,
    tensorDelta: tfAfter ? tfAfter.numTensors - tfBefore.numTensors : null,
    bytesDelta: tfAfter ? tfAfter.numBytes - tfBefore.numBytes : null,
    unreliable: Boolean(tfAfter && tfAfter.unreliable),
    survivors,
    survivorCount: survivors.reduce((s, g) => s + g.count, 0),
    survivorBytes: survivors.reduce((s, g) => s + g.bytes, 0),
    node: { before: nodeBefore, after: nodeAfter },
    rssDeltaBytes: nodeAfter.rss - nodeBefore.rss,
    // tf.tidy() given an async function inside the scope: where, how often, how it ended, the fix
    misuse: misuse.since(misuseBefore).filter((r) => r.kind === misuse.ASYNC_TIDY),
  };
  report.toText = () => reportText(report);
  Object.defineProperty(report, 'toText', { enumerable: false });
  if (failed) {
    if (failed !== null && typeof failed === 'object' && !('trainguardReport' in failed)) {
      // the step's own error goes on unchanged; the scope's report (and any misuse it names) rides on it
      Object.defineProperty(failed, 'trainguardReport', { value: report, enumerable: false });
    }
    throw failed;
  }
  if (maxBytes !== null && report.survivorBytes > maxBytes) {
    throw new LeakError(
      `${formatBytes(report.survivorBytes)} in ${report.survivorCount} tensors survived the scope, over maxSurvivorBytes=${formatBytes(maxBytes)}: ` +
        `${describe(survivors)}; dispose them (model.dispose(), tf.dispose()) or name them in keep`,
      report,
    );
  }
  if (maxCount !== null && report.survivorCount > maxCount) {
    throw new LeakError(
      `${report.survivorCount} tensors survived the scope, over maxSurvivors=${maxCount}: ${describe(survivors)}; ` +
        'dispose them (model.dispose(), tf.dispose()) or name them in keep',
      report,
    );
  }
  return { value, report };
}

function describe(survivors, limit = 3) {
  const parts = survivors.slice(0, limit).map((g) => `${g.count} ${g.kind} ${g.dtype}[${g.shape.join(', ')}] (${formatBytes(g.bytes)})`);
  if (survivors.length > limit) parts.push(`${survivors.length - limit} more kinds`);
  return parts.join(', ') || 'nothing';
}

function reportText(r) {
  const lines = [];
  if (r.tfjs) {
    lines.push(
      `tensors: ${r.numTensorsBefore} -> ${r.numTensorsAfter} (${r.tensorDelta >= 0 ? '+' : ''}${r.tensorDelta}), ` +
        `numBytes ${formatBytes(r.numBytesBefore)} -> ${formatBytes(r.numBytesAfter)}${r.unreliable ? '  (tf.memory() says unreliable: an upper bound, or native memory not counted)' : ''}`,
    );
    lines.push(`survivors: ${r.survivorCount} tensors, ${formatBytes(r.survivorBytes)}`);
    for (const g of r.survivors) lines.push(`  ${g.count} x ${g.kind} ${g.dtype}[${g.shape.join(', ')}]  ${formatBytes(g.bytes)}`);
  } else {
    lines.push('TF.js not loaded: process memory only');
  }
  lines.push(`rss: ${formatBytes(r.node.before.rss)} -> ${formatBytes(r.node.after.rss)}, heapUsed: ${formatBytes(r.node.before.heapUsed)} -> ${formatBytes(r.node.after.heapUsed)}`);
  lines.push(`time: ${r.durationMs.toFixed(1)} ms`);
  for (const m of r.misuse || []) lines.push(`misuse: ${misuse.describe(m)}`);
  return lines.join('\n');
}

module.exports = { scope, LeakError, formatBytes };
