'use strict';
// A matmul inside tf.tidy(), its result read back as a number: nothing outlives the call.
const EXPECTED = 'no_leak';
const SOURCE = 'TF.js: a tf.tidy() step that returns a number (flat, about 1 ms a call)';
const tf = require('@tensorflow/tfjs');

tf.setBackend('cpu');

function step() {
  return tf.tidy(() => {
    const a = tf.randomNormal([64, 64]);
    return a.matMul(a).relu().sum().dataSync()[0];
  });
}

module.exports = { EXPECTED, SOURCE, step };
