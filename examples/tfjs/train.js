// The first source document's loop: many small TF.js models trained one after the other.
// Guarded three ways: scope() around each iteration (below), `trainguard leakcheck train.js:step`,
// and `trainguard run train.js:train` (or `--cmd "node train.js"`) over a grid of params.
const tf = require('@tensorflow/tfjs');
const trainguard = require('trainguard');

function buildModel(units) {
  const model = tf.sequential();
  model.add(tf.layers.dense({ units, inputShape: [64], activation: 'relu' }));
  model.add(tf.layers.dense({ units: 1 }));
  model.compile({ optimizer: tf.train.sgd(0.01), loss: 'meanSquaredError' });
  return model;
}

function setup() {
  return { epochs: 1, batchSize: 256, verbose: 0 }; // what every iteration shares, made once
}

// one iteration: build, make data, fit, dispose everything it made
async function step(config, units = 32) {
  const model = buildModel(units);
  const xs = tf.randomNormal([1024, 64]);
  const ys = tf.randomNormal([1024, 1]);
  const history = await model.fit(xs, ys, config);
  tf.dispose([xs, ys]);
  model.optimizer.dispose(); // an optimizer object passed to compile() is not disposed by the model
  model.dispose();
  return history.history.loss[0];
}

// one trial for `trainguard run train.js:train --params grid.yaml`
async function train(params) {
  const loss = await step({ ...setup(), epochs: params.epochs || 1 }, params.units || 32);
  return { loss, tensors: tf.memory().numTensors };
}

module.exports = { setup, step, train };

if (require.main === module) {
  (async () => {
    if (process.env.TRAINGUARD_PARAMS_FILE) {
      // run as a command trial (`trainguard run --cmd "node train.js"`): params in, one result line out
      trainguard.result(await train(trainguard.params()));
      return;
    }
    const config = setup();
    for (let i = 0; i < 3; i++) {
      const { value, report } = await trainguard.scope(() => step(config), { maxSurvivorBytes: 1e6 });
      console.log(`iteration ${i}: loss ${value.toFixed(3)}, ${report.survivorCount} tensors survived, numTensors ${report.numTensorsAfter}`);
    }
  })();
}
