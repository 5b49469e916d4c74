'use strict';
// Tensors all disposed, but each call's predictions are copied out (arraySync) and kept in a
// plain JS array: tf.memory() is flat, the JS heap grows (about 8 KiB a call).
const EXPECTED = 'leak';
const SOURCE = 'TF.js: predictions copied to JS arrays (arraySync) and kept every call; tensors flat';
const tf = require('@tensorflow/tfjs');

tf.setBackend('cpu');
const KEPT = [];

function step() {
  const rows = tf.tidy(() => tf.randomNormal([256, 4]).relu().arraySync());
  KEPT.push(rows);
}

module.exports = { EXPECTED, SOURCE, step };
