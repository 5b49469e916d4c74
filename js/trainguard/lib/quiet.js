'use strict';
// The start-up banner of TF.js's CPU backend in Node ("Hi, looks like you are running TensorFlow.js
// in Node.js ...") printed by every worker and leak-check process would bury the run's own output;
// trainguard's processes drop that one message (as the Python workers drop TensorFlow's banner).
// Everything else a trial writes, warnings included, comes through.

const BANNER = 'looks like you are running TensorFlow.js in Node.js';

function install() {
  const warn = console.warn.bind(console);
  console.warn = (...args) => {
    if (args.length === 1 && typeof args[0] === 'string' && args[0].includes(BANNER)) return;
    warn(...args);
  };
}

module.exports = { install, BANNER };
