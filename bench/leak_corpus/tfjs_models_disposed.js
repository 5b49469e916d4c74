'use strict';
// examples/tfjs's step: the same loop with everything it makes disposed. TF.js itself keeps
// about 1 KiB a model in tfjs-layers' map of unique weight names, and V8 grows its heap for the
// first 150-300 calls (code tiering up), which RSS alone read as a leak at the 120-call wait.
const EXPECTED = 'no_leak';
const SOURCE = 'TF.js: a model built, fitted and disposed every call (examples/tfjs/train.js)';
const tf = require('@tensorflow/tfjs');

tf.setBackend('cpu');

function setup() {
  return { epochs: 1, batchSize: 256, verbose: 0 };
}

async function step(config) {
  const model = tf.sequential();
  model.add(tf.layers.dense({ units: 32, inputShape: [64], activation: 'relu' }));
  model.add(tf.layers.dense({ units: 1 }));
  model.compile({ optimizer: tf.train.sgd(0.01), loss: 'meanSquaredError' });
  const xs = tf.randomNormal([1024, 64]);
  const ys = tf.randomNormal([1024, 1]);
  await model.fit(xs, ys, config);
  tf.dispose([xs, ys]);
  model.optimizer.dispose();
  model.dispose();
}

module.exports = { EXPECTED, SOURCE, setup, step };
