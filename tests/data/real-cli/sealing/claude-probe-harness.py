import asyncio, json, os, sys, time, shutil, tempfile, hashlib, subprocess
sys.path.insert(0, '/tmp/hcw')
import fake

BINS = {'197': '/tmp/hc197/node_modules/.bin/claude', 'latest': '/tmp/hclatest/node_modules/.bin/claude'}
BASE = ['-p', '--output-format', 'stream-json', '--verbose', '--tools', '', '--strict-mcp-config',
        '--model', 'claude-sonnet-4-6']
OUT = '/tmp/hcw/out'
os.makedirs(OUT, exist_ok=True)


def uline(*texts):
    return json.dumps({"type": "user", "message": {"role": "user", "content": [
        {"type": "text", "text": t} for t in texts]}}) + "\n"


def mkhome(tag='h'):
    return tempfile.mkdtemp(prefix=f'hc-{tag}-', dir='/tmp/hcw/tmp')


os.makedirs('/tmp/hcw/tmp', exist_ok=True)


def env_for(home, url, extra=None):
    e = dict(HOME=home, ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY='test', DISABLE_AUTOUPDATER='1',
             CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC='1', DISABLE_TELEMETRY='1',
             CLAUDE_CODE_MAX_RETRIES='0', PATH='/usr/bin:/bin')
    e.update(extra or {})
    return {k: v for k, v in e.items() if v is not None}


async def run(api, case, ver='197', extra=(), inp='hello', stream_in=True, home=None, cwd=None,
              env_extra=None, wrap=None, keep_open=0.0, pre_delay=0.0, timeout=90, base=BASE,
              close_stdin=True):
    home = home or mkhome()
    cwd = cwd or tempfile.mkdtemp(prefix='hc-cwd-', dir='/tmp/hcw/tmp')
    argv = [BINS[ver]] + list(base) + (['--input-format', 'stream-json'] if stream_in else []) + list(extra)
    if wrap:
        argv = wrap(argv, home, cwd)
    env = env_for(home, api.url, env_extra)
    nreq0 = len(api.requests)
    stamp = time.time()
    t0 = time.monotonic()
    p = await asyncio.create_subprocess_exec(*argv, cwd=cwd, env=env, stdin=asyncio.subprocess.PIPE,
                                             stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    times = {}
    lines = []

    async def rd():
        while True:
            l = await p.stdout.readline()
            if not l:
                break
            now = time.monotonic() - t0
            lines.append(l.decode())
            times.setdefault('first_line', now)
            try:
                o = json.loads(l)
                if o.get('type') in ('assistant', 'result', 'stream_event'):
                    times.setdefault('first_content', now)
                if o.get('type') == 'result':
                    times.setdefault('result', now)
            except Exception:
                pass
    rt = asyncio.create_task(rd())
    et = asyncio.create_task(p.stderr.read())
    if pre_delay:
        await asyncio.sleep(pre_delay)
    times['write'] = time.monotonic() - t0
    if inp is not None:
        p.stdin.write(inp.encode() if isinstance(inp, str) else inp)
        await p.stdin.drain()
    if keep_open:
        try:
            await asyncio.wait_for(p.wait(), keep_open)
            times['exited_while_open'] = True
        except asyncio.TimeoutError:
            times['exited_while_open'] = False
    if close_stdin:
        p.stdin.close()
    try:
        rc = await asyncio.wait_for(p.wait(), timeout)
    except asyncio.TimeoutError:
        p.kill()
        rc = 'timeout'
    await rt
    err = (await et).decode()
    times['exit'] = time.monotonic() - t0
    await asyncio.sleep(0.05)
    reqs = api.requests[nreq0:]
    res = dict(case=case, ver=ver, argv=argv, env=env, cwd=cwd, home=home, rc=rc, stderr=err,
               stdout=''.join(lines), times=times, requests=reqs, stamp=stamp)
    with open(f'{OUT}/{case}.json', 'w') as f:
        json.dump(res, f, indent=1)
    return res


def msgs(res):
    return [r for r in res['requests'] if r['path'].startswith('/v1/messages') and 'count_tokens' not in r['path']]


def last_body(res):
    m = msgs(res)
    return m[-1]['body'] if m else None


def sha(x):
    return hashlib.sha256(json.dumps(x, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def short(s, n=300):
    return s if len(s) <= 2 * n + 50 else s[:n] + f' …[{len(s)} chars, sha256 {hashlib.sha256(s.encode()).hexdigest()[:16]}]… ' + s[-n:]


def strip_body(b):
    b = json.loads(json.dumps(b))
    for blk in b.get('system') or []:
        if isinstance(blk, dict) and isinstance(blk.get('text'), str) and len(blk['text']) > 700:
            t = blk['text']
            blk['text'] = t[:300] + f' …[stripped: {len(t)} chars, sha256 {hashlib.sha256(t.encode()).hexdigest()}]… ' + t[-300:]
    return b


def result_line(res):
    for l in res['stdout'].splitlines():
        try:
            o = json.loads(l)
        except Exception:
            continue
        if o.get('type') == 'result':
            return o
    return None


def with_api(coro_fn):
    async def main():
        api = await fake.start_fake_model_api('127.0.0.1', 0)
        try:
            return await coro_fn(api)
        finally:
            await api.close()
    return asyncio.run(main())
