#!/usr/bin/env python3
"""scripts/mutate.py on a small fixture, with `true` for the build and grep for the tests: which
mutants it makes, how it classifies them, and that the file comes back whatever happens."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'scripts', 'mutate.py')
FIXTURE = '''// a < b in a comment stays
int f(int x) {
  if (x < 0) return 0;
  const char* s = "a < b && c";  /*/ x + 1 */
  char q = '\\'', r = '"';  /* a block comment
     x < 1 across lines, and a lone /*/ */
  return x + 1;
}
'''
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print('FAIL:', what)


def sleepers():
    """Processes running `sleep 23.5`, the stand-in for a test that hangs."""
    found = []
    for pid in filter(str.isdigit, os.listdir('/proc')):
        try:
            with open(f'/proc/{pid}/cmdline', 'rb') as f:
                if f.read().split(b'\0')[:2] == [b'sleep', b'23.5']:
                    found.append(pid)
        except OSError:
            pass
    return found


def mutate(src, *args, **kw):
    return subprocess.run([sys.executable, SCRIPT, src, '--build-cmd', 'true', *args], capture_output=True,
                          text=True, **kw)


with tempfile.TemporaryDirectory() as tmp:
    src = os.path.join(tmp, 'f.cpp')
    with open(src, 'w') as f:
        f.write(FIXTURE)

    # The mutants: operators and small constants in code, none in the comment or the string.
    r = mutate(src, '--list')
    listed = r.stdout.strip().split('\n')
    want = [f'{src}:3: if (x <= 0) return 0;', f'{src}:3: if (x < 1) return 0;', f'{src}:3: if (x < 0) return 1;',
            f'{src}:7: return x - 1;', f'{src}:7: return x + 0;', f'{src}:7: return x + 2;']
    check(r.returncode == 0 and sorted(listed) == sorted(want), f'--list gave {listed}')
    r = mutate(src, '--list', '--lines', '4-9')
    check(len(r.stdout.strip().split('\n')) == 3, f'--lines 4-9 gave {r.stdout!r}')

    # A run: the "tests" look at the comparison and at line 5, not at what line 3 returns.
    log = os.path.join(tmp, 'log.jsonl')
    tests = f"grep -q 'x < 0)' {src} && grep -q 'x + 1;' {src}"
    r = mutate(src, '--test', tests, '--log', log)
    check(r.returncode == 0, f'run failed: {r.stderr}')
    check('5 killed, 1 survived, 0 did not compile' in r.stdout, f'summary: {r.stdout}')
    check('survived ' + src + ':3: if (x < 0) return 0;  ->  if (x < 0) return 1;' in r.stdout, r.stdout)
    records = [json.loads(line) for line in open(log)]
    check(len(records) == 6 and sum(x['status'] == 'survived' for x in records) == 1, f'log: {records}')
    check(open(src).read() == FIXTURE, 'the file was not restored after a run')
    check(not os.path.exists(src + '.mutate-orig'), 'the backup was left behind')

    # --skip-done: the mutants a log already records are left out, matched on the text of the line,
    # so a record of line 7 taken before line 7 changed does not count as a run of the new line 7.
    r = mutate(src, '--list', '--skip-done', log)
    check(r.returncode == 0 and r.stdout.strip() == '', f'--skip-done with every mutant done: {r.stdout!r}')
    partial = os.path.join(tmp, 'partial.jsonl')
    with open(partial, 'w') as f:
        for x in records:
            if x['line'] == 7:
                x['original'] = 'return x + 1;  // as it was once'
            if x['line'] != 3 or x['mutant'] != 'if (x < 0) return 1;':
                f.write(json.dumps(x) + '\n')
    r = mutate(src, '--list', '--skip-done', partial)
    left = sorted(r.stdout.strip().split('\n'))
    check(left == sorted([f'{src}:3: if (x < 0) return 1;', f'{src}:7: return x - 1;', f'{src}:7: return x + 0;',
                          f'{src}:7: return x + 2;']), f'--skip-done of a partial, older log left {left}')
    r = mutate(src, '--test', tests, '--skip-done', partial)
    check(r.returncode == 0 and '3 killed, 1 survived, 0 did not compile' in r.stdout,
          f'a run with --skip-done: {r.stdout}')
    with open(partial, 'a') as f:
        f.write('{"file": "f.cpp"}\n')
    r = mutate(src, '--list', '--skip-done', partial)
    check(r.returncode != 0 and f'--skip-done {partial}:6: not a line that --log writes' in r.stderr,
          f'a broken log: {r.stderr}')
    r = mutate(src, '--list', '--skip-done', os.path.join(tmp, 'none.jsonl'))
    check(r.returncode != 0 and 'no such file' in r.stderr, f'a missing log: {r.stderr}')

    # A test that prints bytes that are not UTF-8 (a mutant can corrupt a name in an error message):
    # the script reads them and goes on (it once stopped with a UnicodeDecodeError, leaving the sweep).
    noisy = f"printf '\\321\\377\\n'; grep -q 'x < 0)' {src}"
    r = mutate(src, '--test', noisy, '--lines', '3-3')
    check(r.returncode == 0 and '2 killed, 1 survived, 0 did not compile' in r.stdout,
          f'bytes that are not UTF-8: {r.stdout} {r.stderr}')
    check(open(src).read() == FIXTURE, 'the file was not restored after a run with bytes that are not UTF-8')

    # A test that hangs past --timeout kills its mutant, and is itself killed, with its children.
    hang = f"grep -q 'x < 0)' {src} || sleep 23.5"
    r = mutate(src, '--test', hang, '--lines', '3-3', '--sample', '1', '--seed', '0', '--timeout', '1')
    check('1 killed' in r.stdout and '[timeout]' in r.stdout, f'timeout: {r.stdout} {r.stderr}')
    check(not sleepers(), 'the hung test was left running')

    # SIGTERM in the middle of a mutant's tests: the original comes back, and the backup goes.
    p = subprocess.Popen([sys.executable, SCRIPT, src, '--build-cmd', 'true', '--test', hang, '--timeout', '60'],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 20
    while open(src).read() == FIXTURE and time.time() < deadline:
        time.sleep(0.05)
    check(open(src).read() != FIXTURE, 'no mutant was written within 20 s')
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    check(open(src).read() == FIXTURE, 'the file was not restored after SIGTERM')
    check(not os.path.exists(src + '.mutate-orig'), 'the backup was left behind after SIGTERM')
    check('interrupted' in err, f'SIGTERM: {err}')
    check(p.returncode == 128 + signal.SIGTERM, f'SIGTERM: exit status {p.returncode}')
    check(not sleepers(), 'the interrupted test was left running')

    # Refusals, each before the file is touched.
    r = mutate(src, '--test', 'false')
    check(r.returncode != 0 and 'the tests fail (or hang) without a mutant' in r.stderr, f'failing suite: {r.stderr}')
    r = subprocess.run([sys.executable, SCRIPT, src, '--build-cmd', 'false', '--test', 'true'], capture_output=True,
                       text=True)
    check(r.returncode != 0 and 'the build fails before any mutant' in r.stderr, f'failing build: {r.stderr}')
    with open(src + '.mutate-orig', 'w') as f:
        f.write(FIXTURE)
    r = subprocess.run([sys.executable, SCRIPT, src, '--build-cmd', 'false', '--test', 'true'], capture_output=True,
                       text=True)  # checked before the build: the file itself may still hold a mutant
    check(r.returncode != 0 and 'an earlier run was interrupted' in r.stderr, f'stale backup: {r.stderr}')
    os.remove(src + '.mutate-orig')
    for bad in (['--lines', '9-3'], ['--lines', 'x'], ['--sample', '0'], ['--timeout', '0']):
        r = mutate(src, *bad)
        check(r.returncode != 0 and 'mutate.py: ' in r.stderr, f'{bad}: {r.stderr}')
    r = mutate(os.path.join(tmp, 'missing.cpp'))
    check(r.returncode != 0 and 'no such file' in r.stderr, f'missing file: {r.stderr}')
    check(open(src).read() == FIXTURE, 'a refusal changed the file')

print(f'{len(failures)} failure(s)' if failures else 'mutate.py: all checks passed')
sys.exit(1 if failures else 0)
