'use strict';
// Trivial trials for bench/node_dispatch.py: what the worker loop itself costs per trial.
async function trivial(params) {
  return { i: params.i };
}

async function tfjs_trivial(params) {
  // TF.js loaded (the worker then reads tf.memory() at each trial's end)
  const tf = require('@tensorflow/tfjs');
  return { i: params.i, tensors: tf.memory().numTensors };
}

module.exports = { trivial, tfjs_trivial };
