'use strict';
// The first source document's loop with nothing disposed: each call builds a small model, makes
// its data and fits it, and keeps all of it (4 weights, the optimizer's learning rate, xs, ys).
const EXPECTED = 'leak';
const SOURCE = 'TF.js: a model and its data built and fitted every call, never disposed (+268 KiB of tensors a call)';
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
  await model.fit(tf.randomNormal([1024, 64]), tf.randomNormal([1024, 1]), config);
}

module.exports = { EXPECTED, SOURCE, setup, step };
