'use strict';
// Tensors disposed, but each call's data is copied to a Node Buffer (outside the JS heap) and
// kept: tf.memory() and heapUsed are flat, external memory and RSS grow 64 KiB a call.
const EXPECTED = 'leak';
const SOURCE = 'TF.js: each batch copied to a 64 KiB Node Buffer and kept; tensors and JS heap flat';
const tf = require('@tensorflow/tfjs');

tf.setBackend('cpu');
const KEPT = [];

function step() {
  const values = tf.tidy(() => tf.randomNormal([128, 128]).dataSync());
  KEPT.push(Buffer.from(values.buffer.slice(0)));
}

module.exports = { EXPECTED, SOURCE, step };
