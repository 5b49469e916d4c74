'use strict';
// One 64x64 result kept a call in a history array, its temporaries disposed by tf.tidy().
const EXPECTED = 'leak';
const SOURCE = 'TF.js: one tensor (16 KiB) pushed to a history array every call';
const tf = require('@tensorflow/tfjs');

tf.setBackend('cpu');
const HISTORY = [];

function step() {
  HISTORY.push(tf.tidy(() => {
    const a = tf.randomNormal([64, 64]);
    return a.matMul(a).relu();
  }));
}

module.exports = { EXPECTED, SOURCE, step };
