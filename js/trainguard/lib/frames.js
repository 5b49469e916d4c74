'use strict';
// trainguard's worker framing: a 4-byte big-endian length, then that many bytes of one JSON object.

const fs = require('fs');
const net = require('net');

function encode(msg) {
  const body = Buffer.from(JSON.stringify(msg), 'utf8');
  const head = Buffer.alloc(4);
  head.writeUInt32BE(body.length, 0);
  return Buffer.concat([head, body]);
}

const sleeper = new Int32Array(new SharedArrayBuffer(4));

/** Write one message to `fd`, whole, synchronously (so it is out before the process exits). */
function writeMessage(fd, msg) {
  const buf = encode(msg);
  let off = 0;
  while (off < buf.length) {
    try {
      off += fs.writeSync(fd, buf, off, buf.length - off);
    } catch (err) {
      if (err.code !== 'EAGAIN') throw err;
      Atomics.wait(sleeper, 0, 0, 1);
    }
  }
}

/** Read messages from `fd` (a pipe); calls onMessage(msg) for each and onEnd() at EOF. */
function readMessages(fd, onMessage, onEnd) {
  const sock = new net.Socket({ fd, readable: true, writable: false });
  let buf = Buffer.alloc(0);
  sock.on('data', (chunk) => {
    buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
    while (buf.length >= 4) {
      const size = buf.readUInt32BE(0);
      if (buf.length < 4 + size) break;
      const body = buf.subarray(4, 4 + size);
      buf = buf.subarray(4 + size);
      onMessage(JSON.parse(body.toString('utf8')));
    }
  });
  sock.on('end', onEnd);
  sock.on('error', onEnd);
  return sock;
}

module.exports = { encode, writeMessage, readMessages };
