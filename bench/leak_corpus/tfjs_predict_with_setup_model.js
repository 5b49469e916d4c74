'use strict';
// A model built once in setup(); each call predicts a fresh batch inside tf.tidy() and reads the
// mean back: inference in a loop, nothing outlives the call.
const EXPECTED = 'no_leak';
const SOURCE = 'TF.js: model.predict() on a new batch every call inside tf.tidy(), the model made once';
const tf = require('@tensorflow/tfjs');

tf.setBackend('cpu');

function setup() {
  const model = tf.sequential();
  model.add(tf.layers.dense({ units: 64, inputShape: [32], activation: 'relu' }));
  model.add(tf.layers.dense({ units: 4, activation: 'softmax' }));
  return model;
}

function step(model) {
  return tf.tidy(() => model.predict(tf.randomNormal([512, 32])).mean().dataSync()[0]);
}

module.exports = { EXPECTED, SOURCE, setup, step };
