'use strict';
// `produce` and `consume` with KafkaJS, as app/clients runs them for the other libraries: a
// producer offering --rate bytes/s of --record-bytes records with at most --window bytes
// unacknowledged; a consumer in --group reading --topic from the start. Both print one JSON
// line per second, {"name", "t", "bytes", "records", ...}, then a last one with "final": true
// and the totals (app/clients/report.py's format). Exit status 2: bad arguments.

const { Kafka, Partitioners, logLevel } = require('kafkajs');

function parse(argv) {
  const [program, ...rest] = argv;
  if (program !== 'produce' && program !== 'consume') {
    throw new Error(`first argument must be produce or consume, not ${program}`);
  }
  const options = {};
  for (let i = 0; i < rest.length; i += 2) {
    if (!rest[i].startsWith('--') || i + 1 >= rest.length) {
      throw new Error(`expected --name value, got ${rest[i]}`);
    }
    options[rest[i].slice(2)] = rest[i + 1];
  }
  return { program, options };
}

function required(options, name) {
  if (options[name] === undefined) throw new Error(`--${name} is required`);
  return options[name];
}

function number(options, name, fallback) {
  const value = options[name] === undefined ? fallback : Number(options[name]);
  if (!Number.isFinite(value) || value <= 0) throw new Error(`--${name} must be a positive number`);
  return value;
}

const nowS = () => performance.now() / 1000;

// Per-second counts, seconds counted from `epoch` (wall-clock seconds) when given.
class Reporter {
  constructor(name, epoch) {
    this.name = name;
    this.start = nowS() - (epoch === undefined ? 0 : Date.now() / 1000 - epoch);
    this.second = 0;
    this.current = {};
    this.totals = {};
  }

  add(counter, amount) {
    this.tick();
    this.current[counter] = (this.current[counter] || 0) + amount;
    this.totals[counter] = (this.totals[counter] || 0) + amount;
  }

  tick() {
    const now = Math.floor(nowS() - this.start);
    while (this.second < now) {
      this.line({ t: this.second, ...this.current });
      this.current = {};
      this.second += 1;
    }
  }

  finish() {
    this.tick();
    this.line({ final: true, seconds: nowS() - this.start, ...this.totals });
  }

  line(data) {
    process.stdout.write(JSON.stringify({ name: this.name, ...data }) + '\n');
  }
}

// An offered load: `rate` units/s, at most `burst` saved while idle, time blocked not made up.
class Pace {
  constructor(rate, burst) {
    this.rate = rate;
    this.burst = burst;
    this.tokens = 0;
    this.last = nowS();
  }

  // Seconds to wait before `amount` may go (0: take it now).
  take(amount) {
    const now = nowS();
    this.tokens = Math.min(this.burst, this.tokens + (now - this.last) * this.rate);
    this.last = now;
    if (this.tokens >= amount) {
      this.tokens -= amount;
      return 0;
    }
    return (amount - this.tokens) / this.rate;
  }
}

// records in one send at most, about what a 5 ms linger gathers at these rates
const MAX_BATCH = 16;

const sleep = (s) => new Promise((resolve) => setTimeout(resolve, s * 1000));

async function produce(kafka, options, reporter, deadline) {
  const size = number(options, 'record-bytes', 1000);
  const rate = number(options, 'rate');
  const window = number(options, 'window', 256 * 1024);
  const topic = required(options, 'topic');
  const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner });
  await producer.connect();
  const value = Buffer.alloc(size, 'x');
  const pace = new Pace(rate, Math.max(size, rate / 20));
  let outstanding = 0;
  const pending = new Set();
  while (nowS() < deadline) {
    // what the pace and the window let go now, as one send (KafkaJS does not linger)
    let records = 0;
    while (records < MAX_BATCH && outstanding + (records + 1) * size <= window
           && pace.take(size) === 0) {
      records += 1;
    }
    if (records === 0) {
      await sleep(0.005);
      reporter.tick();
      continue;
    }
    const bytes = records * size;
    outstanding += bytes;
    const sent = producer.send({ topic, messages: Array(records).fill({ value }) }).then(
      () => {
        reporter.add('bytes', bytes);
        reporter.add('records', records);
      },
      () => reporter.add('errors', 1),
    ).finally(() => {
      outstanding -= bytes;
      pending.delete(sent);
    });
    pending.add(sent);
  }
  await Promise.race([Promise.allSettled(pending), sleep(5)]);
  await producer.disconnect();
}

async function consume(kafka, options, reporter, deadline) {
  const fetchBytes = number(options, 'fetch-bytes', 65536);
  const consumer = kafka.consumer({
    groupId: required(options, 'group'),
    sessionTimeout: 6000,
    heartbeatInterval: 1000,
    maxBytesPerPartition: fetchBytes,
    maxBytes: Math.max(fetchBytes, 1024 * 1024),
  });
  await consumer.connect();
  await consumer.subscribe({ topics: [required(options, 'topic')], fromBeginning: true });
  await consumer.run({
    eachBatch: async ({ batch }) => {
      let bytes = 0;
      for (const message of batch.messages) bytes += message.value ? message.value.length : 0;
      if (batch.messages.length) {
        reporter.add('bytes', bytes);
        reporter.add('records', batch.messages.length);
      }
    },
  });
  while (nowS() < deadline) {
    await sleep(0.2);
    reporter.tick();
  }
  await consumer.disconnect();
}

async function main() {
  let program, options;
  try {
    ({ program, options } = parse(process.argv.slice(2)));
    required(options, 'bootstrap');
    number(options, 'seconds', 30);
  } catch (error) {
    process.stderr.write(error.message + '\n');
    process.exit(2);
  }
  const epoch = options.epoch === undefined ? undefined : Number(options.epoch);
  const reporter = new Reporter(options.name || 'client', epoch);
  const deadline = nowS() + number(options, 'seconds', 30);
  const kafka = new Kafka({
    clientId: required(options, 'client-id'),
    brokers: options.bootstrap.split(','),
    logLevel: logLevel.NOTHING,
  });
  await (program === 'produce' ? produce : consume)(kafka, options, reporter, deadline);
  reporter.finish();
}

main().then(() => process.exit(0), (error) => {
  process.stderr.write(`${error.message}\n`);
  process.exit(1);
});
