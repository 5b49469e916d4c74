'use strict';
// Readings of TF.js's engine (tf.memory()) and of the Node process (process.memoryUsage()).
// TF.js is found through the global engine every copy of @tensorflow/tfjs-core shares
// (globalThis._tfengine), so nothing here imports TF.js: a process that never loaded it pays nothing.

const fs = require('fs');

/** The TF.js engine of this process, or null when TF.js is not loaded. */
function tfEngine() {
  const engine = globalThis._tfengine;
  return engine && typeof engine.memory === 'function' ? engine : null;
}

/** tf.memory() as plain data, or null when TF.js is not loaded. */
function tfMemory() {
  const engine = tfEngine();
  if (engine === null) return null;
  const m = engine.memory();
  const out = {
    numTensors: m.numTensors,
    numDataBuffers: m.numDataBuffers,
    numBytes: m.numBytes,
    unreliable: Boolean(m.unreliable),
  };
  if (m.reasons && m.reasons.length) out.reasons = m.reasons.map(String);
  try {
    out.backend = engine.backendName || null;
    out.numVariables = Object.keys(engine.state.registeredVariables || {}).length;
  } catch (err) {
    // internal state moved in another TF.js version: the public figures are still there
  }
  return out;
}

/** process.memoryUsage() in bytes: rss, heapTotal, heapUsed, external, arrayBuffers. */
function nodeMemory() {
  const m = process.memoryUsage();
  return {
    rss: m.rss,
    heapTotal: m.heapTotal,
    heapUsed: m.heapUsed,
    external: m.external,
    arrayBuffers: m.arrayBuffers,
  };
}

/** Both readings at once: {node, tfjs} (tfjs null without TF.js). */
function memory() {
  return { node: nodeMemory(), tfjs: tfMemory() };
}

/** A field of /proc/self/status in bytes (Linux), or null. */
function procStatusBytes(field) {
  try {
    const text = fs.readFileSync('/proc/self/status', 'utf8');
    const match = text.match(new RegExp(`^${field}:\\s+(\\d+)\\s+kB`, 'm'));
    return match ? Number(match[1]) * 1024 : null;
  } catch (err) {
    return null;
  }
}

/** Reset the kernel's peak RSS (VmHWM) of this process, so the next read is a fresh peak. */
function resetPeak() {
  try {
    fs.writeFileSync('/proc/self/clear_refs', '5');
  } catch (err) {
    // not Linux, or not allowed: the peak then covers the whole process's life
  }
}

/** The TF.js version loaded, or null. */
function tfVersion() {
  const engine = tfEngine();
  if (engine === null) return null;
  try {
    for (const key of Object.keys(require.cache)) {
      if (/[\\/]@tensorflow[\\/]tfjs-core[\\/]package\.json$/.test(key)) return require.cache[key].exports.version;
    }
  } catch (err) {
    // fall through
  }
  return 'loaded';
}

module.exports = { tfEngine, tfMemory, nodeMemory, memory, procStatusBytes, resetPeak, tfVersion };
