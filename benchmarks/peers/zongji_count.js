// Count row changes zongji decodes from FILE between START and END, streamed from the server.
// usage: node zongji_count.js HOST PORT USER PASSWORD FILE START END
const zongjiModule = require('@vlasky/zongji'); // ESM package: require(esm) gives its namespace
const ZongJi = zongjiModule.default || zongjiModule;
const [host, port, user, password, file, start, end] = process.argv.slice(2);
const zongji = new ZongJi({ host, port: Number(port), user, password });
let rows = 0;
let t0 = null;
let done = false;
function finish() {
  if (done) return;
  done = true;
  const seconds = (process.hrtime.bigint() - (t0 || process.hrtime.bigint())) / 1000n;
  console.log(JSON.stringify({ rows, seconds: Number(seconds) / 1e6 }));
  zongji.stop();
  process.exit(0);
}
zongji.on('binlog', (evt) => {
  if (t0 === null) t0 = process.hrtime.bigint();
  if (evt.rows) rows += evt.rows.length;
  if (evt.getEventName() === 'rotate' && evt.binlogName !== file && rows > 0) finish();
  else if (evt.nextPosition >= Number(end)) finish();
});
zongji.on('error', (err) => { console.error(String(err)); process.exit(1); });
zongji.start({
  serverId: 9901, filename: file, position: Number(start),
  includeEvents: ['tablemap', 'writerows', 'updaterows', 'deleterows', 'rotate'],
});
