#!/usr/bin/env python3
"""scripts/mutate.py on a small fixture, with grep for the build (it fails on an #error line, as a
compiler does) and for the tests: which mutants it makes, how it classifies them, that the file comes
back whatever happens, that a build command that does not compile the file is refused (the canary), and
the default commands, run by a stand-in cmake on a build folder whose name has a space."""
import json
import os
import shlex
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


# The stand-in for a test that hangs: `sleep SLEEP`, a duration of this run's own, so that the processes
# it finds are its own, not those of another run of this test at the same time.
SLEEP = f'23.{os.getpid()}'


def sleepers():
    """Processes running `sleep SLEEP`."""
    found = []
    for pid in filter(str.isdigit, os.listdir('/proc')):
        try:
            with open(f'/proc/{pid}/cmdline', 'rb') as f:
                if f.read().split(b'\0')[:2] == [b'sleep', SLEEP.encode()]:
                    found.append(pid)
        except OSError:
            pass
    return found


def compiles(path):
    """A stand-in build that compiles `path`: it fails when the file has an #error line."""
    return f"! grep -q '^#error' {shlex.quote(path)}"


def mutate(src, *args, **kw):
    return subprocess.run([sys.executable, SCRIPT, src, '--build-cmd', compiles(src), *args], capture_output=True,
                          text=True, **kw)


# A stand-in for `cmake --build DIR [--target T] -j2`: it records its arguments in DIR/calls.jsonl and
# "compiles" the sources that DIR/targets.json lists for T (for every target without --target), failing
# on an #error line.
FAKE_CMAKE = '''#!{python}
import json, os, sys
args = sys.argv[1:]
if len(args) < 2 or args[0] != '--build' or not os.path.isdir(args[1]):
    sys.exit('fake cmake: expected --build DIR, got %r' % args)
with open(os.path.join(args[1], 'calls.jsonl'), 'a') as f:
    f.write(json.dumps(args) + '\\n')
targets = json.load(open(os.path.join(args[1], 'targets.json')))
names = [args[args.index('--target') + 1]] if '--target' in args else list(targets)
for source in sum((targets[n] for n in names), []):
    if open(source).read().startswith('#error'):
        sys.exit(source + ': #error')
'''


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

    # A test that prints without end: 256 MiB of failures, then gtest's summary naming the failed test. The
    # script keeps only the start and the end of a command's output (a sweep was once killed by the OOM
    # killer at 23 GB): its peak memory stays small, and the name is still read from the end.
    flood = (f"grep -q 'x + 1;' {src} || {{ echo start; head -c 268435456 /dev/zero | tr '\\0' x; echo; "
             "echo '[  FAILED  ] Flood.TheLastLine'; exit 1; }")
    peak = ('import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); '
            'print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); print(r.stdout)')
    r = subprocess.run([sys.executable, '-c', peak, sys.executable, SCRIPT, src, '--build-cmd', compiles(src),
                        '--test', flood, '--lines', '7-7', '--log', os.path.join(tmp, 'flood.jsonl')],
                       capture_output=True, text=True)
    status, kib = r.stdout.split('\n')[0].split()
    check(status == '0' and '3 killed, 0 survived' in r.stdout, f'a flood of output: {r.stdout} {r.stderr}')
    check(int(kib) < 128 * 1024, f'a flood of 256 MiB took the script to a peak of {kib} KiB')
    records = [json.loads(x) for x in open(os.path.join(tmp, 'flood.jsonl'))]
    check([x['by'] for x in records] == ['Flood.TheLastLine'] * 3, f'a flood of output: {records}')
    check(open(src).read() == FIXTURE, 'the file was not restored after a flood of output')

    # A test that hangs past --timeout kills its mutant, and is itself killed, with its children.
    hang = f"grep -q 'x < 0)' {src} || sleep {SLEEP}"
    r = mutate(src, '--test', hang, '--lines', '3-3', '--sample', '1', '--seed', '0', '--timeout', '1')
    check('1 killed' in r.stdout and '[timeout]' in r.stdout, f'timeout: {r.stdout} {r.stderr}')
    check(not sleepers(), 'the hung test was left running')

    # SIGTERM in the middle of a mutant's tests: the original comes back, and the backup goes.
    def holds_mutant():
        text = open(src).read()
        return text and text != FIXTURE and not text.startswith('#error')  # not the canary
    p = subprocess.Popen([sys.executable, SCRIPT, src, '--build-cmd', compiles(src), '--test', hang, '--timeout', '60'],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 20
    while not holds_mutant() and time.time() < deadline:
        time.sleep(0.05)
    check(holds_mutant(), 'no mutant was written within 20 s')
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    check(open(src).read() == FIXTURE, 'the file was not restored after SIGTERM')
    check(not os.path.exists(src + '.mutate-orig'), 'the backup was left behind after SIGTERM')
    check('interrupted' in err, f'SIGTERM: {err}')
    check(p.returncode == 128 + signal.SIGTERM, f'SIGTERM: exit status {p.returncode}')
    check(not sleepers(), 'the interrupted test was left running')

    # SIGTERM while the canary builds (a build that hangs on it): the same.
    canary = '#error mutate.py canary: this file is compiled by the build command\n'
    hang_build = f"grep -q '^#error' {src} && sleep {SLEEP}; {compiles(src)}"
    p = subprocess.Popen([sys.executable, SCRIPT, src, '--build-cmd', hang_build, '--test', 'true'],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 20
    while not (open(src).read() == canary + FIXTURE and sleepers()) and time.time() < deadline:
        time.sleep(0.05)
    check(open(src).read() == canary + FIXTURE, 'the canary was not at the top of the file while it built')
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    check(open(src).read() == FIXTURE, 'the file was not restored after SIGTERM during the canary')
    check(not os.path.exists(src + '.mutate-orig'), 'the backup was left behind after SIGTERM during the canary')
    check('interrupted' in err and p.returncode == 128 + signal.SIGTERM,
          f'SIGTERM during the canary: exit status {p.returncode}, {err}')
    check(not sleepers(), 'the canary\'s build was left running')

    # A build command that does not compile the file (the halfling target, for a file of another
    # target): every mutant would survive, so the run is refused before the tests and before any mutant.
    marker = os.path.join(tmp, 'tests-ran')
    r = mutate(src, '--build-cmd', 'true', '--test', f'touch {marker}')
    check(r.returncode != 0 and f'mutate.py: {src} is not compiled by the build command (true)' in r.stderr
          and 'every mutant would survive' in r.stderr and '--build-cmd' in r.stderr,
          f'a build that does not compile the file: {r.stderr}')
    check('mutants' not in r.stdout and not os.path.exists(marker), f'refused after it started: {r.stdout}')
    check(open(src).read() == FIXTURE and not os.path.exists(src + '.mutate-orig'),
          'the canary was not put back after a refusal')
    cu = os.path.join(tmp, 'k.cu')
    with open(cu, 'w') as f:
        f.write(FIXTURE)
    r = mutate(cu, '--build-cmd', 'true', '--test', 'true')
    check(r.returncode != 0 and 'not compiled by the build command' in r.stderr and 'HALFLING_CUDA=ON' in r.stderr,
          f'a .cu file a build does not compile: {r.stderr}')

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

# --since REV: only the lines that are new or changed since a commit, uncommitted changes included. The
# fixture is committed with line 3 and line 7 different; line 7 is then changed back on disk only.
with tempfile.TemporaryDirectory() as tmp:
    def git(*argv):
        return subprocess.run(['git', '-C', tmp, '-c', 'user.name=t', '-c', 'user.email=t@t', *argv],
                              capture_output=True, text=True, check=True)
    src = os.path.join(tmp, 'f.cpp')
    older = FIXTURE.replace('if (x < 0) return 0;', 'if (x <= 5) return 5;').replace('return x + 1;', 'return x;')
    with open(src, 'w') as f:
        f.write(older)
    git('init', '-q')
    git('add', 'f.cpp')
    git('commit', '-q', '-m', 'older')
    first = git('rev-parse', 'HEAD').stdout.strip()
    with open(src, 'w') as f:
        f.write(FIXTURE.replace('return x + 1;', 'return x;'))
    git('commit', '-q', '-am', 'line 3')
    with open(src, 'w') as f:
        f.write(FIXTURE)  # line 7 changed, not committed
    line3 = [f'{src}:3: if (x <= 0) return 0;', f'{src}:3: if (x < 1) return 0;', f'{src}:3: if (x < 0) return 1;']
    line7 = [f'{src}:7: return x - 1;', f'{src}:7: return x + 0;', f'{src}:7: return x + 2;']
    r = mutate(src, '--list', '--since', first)
    check(r.returncode == 0 and sorted(r.stdout.split('\n')[:-1]) == sorted(line3 + line7),
          f'--since the first commit: {r.stdout!r} {r.stderr}')
    r = mutate(src, '--list', '--since', 'HEAD')
    check(r.returncode == 0 and sorted(r.stdout.split('\n')[:-1]) == sorted(line7),
          f'--since HEAD (the uncommitted change only): {r.stdout!r} {r.stderr}')
    r = mutate(src, '--list', '--since', first, '--lines', '1-4')
    check(r.returncode == 0 and sorted(r.stdout.split('\n')[:-1]) == sorted(line3),
          f'--since with --lines: {r.stdout!r} {r.stderr}')
    git('commit', '-q', '-am', 'line 7')
    r = mutate(src, '--list', '--since', 'HEAD')
    check(r.returncode == 0 and r.stdout == '', f'--since HEAD with nothing changed: {r.stdout!r} {r.stderr}')
    r = mutate(src, '--test', 'true', '--since', 'HEAD')
    check(r.returncode == 0 and '0 killed, 0 survived, 0 did not compile' in r.stdout,
          f'a run with nothing changed since HEAD: {r.stdout!r} {r.stderr}')
    # Hunks whose new side holds no line with a mutant, just before lines that have them: line 2 changed
    # alone (a hunk of one line, written without its count), and a line removed after line 3 (a hunk
    # of 0 lines, which git numbers from the line before it).
    lines = FIXTURE.split('\n')
    for name, text in (('line 2', '\n'.join(lines[:1] + ['int f(int x)  {'] + lines[2:])),
                       ('a removed line', '\n'.join(lines[:3] + ['  // removed'] + lines[3:]))):
        with open(src, 'w') as f:
            f.write(text)
        git('commit', '-q', '-am', name)
        with open(src, 'w') as f:
            f.write(FIXTURE)
        r = mutate(src, '--list', '--since', 'HEAD')
        check(r.returncode == 0 and r.stdout == '', f'--since HEAD after {name}: {r.stdout!r} {r.stderr}')
        git('commit', '-q', '-am', 'back')
    r = mutate(src, '--list', '--since', 'no-such-rev')
    check(r.returncode != 0 and 'mutate.py: --since no-such-rev: not a commit of the git repository' in r.stderr,
          f'an unknown revision: {r.stderr}')
    untracked = os.path.join(tmp, 'g.cpp')
    with open(untracked, 'w') as f:
        f.write(FIXTURE)
    r = mutate(untracked, '--list', '--since', 'HEAD')
    check(r.returncode != 0 and f'git does not track {untracked}' in r.stderr, f'an untracked file: {r.stderr}')
    outside = tempfile.mkdtemp()
    try:
        elsewhere = os.path.join(outside, 'h.cpp')
        with open(elsewhere, 'w') as f:
            f.write(FIXTURE)
        r = mutate(elsewhere, '--list', '--since', 'HEAD')
        check(r.returncode != 0 and 'not a commit of the git repository around' in r.stderr,
              f'a file outside any repository: {r.stderr}')
    finally:
        os.remove(elsewhere)
        os.rmdir(outside)
    check(open(src).read() == FIXTURE, '--since changed the file')

# The default commands, run by the stand-in cmake on a build folder with a space in its name, with
# stand-ins for the two test programs. lib.cpp is in the halfling target, sched.cpp in another (as
# tutorials/common/ is): compile_commands.json says so, and the default build then builds every target.
with tempfile.TemporaryDirectory() as tmp:
    fakebin = os.path.join(tmp, 'bin')
    os.mkdir(fakebin)
    with open(os.path.join(fakebin, 'cmake'), 'w') as f:
        f.write(FAKE_CMAKE.format(python=sys.executable))
    os.chmod(os.path.join(fakebin, 'cmake'), 0o755)
    env = dict(os.environ, PATH=fakebin + os.pathsep + os.environ.get('PATH', ''))
    build = os.path.join(tmp, 'build dir')
    os.makedirs(os.path.join(build, 'tests'))
    lib, sched = os.path.join(tmp, 'lib.cpp'), os.path.join(tmp, 'sched.cpp')
    for path in (lib, sched):
        with open(path, 'w') as f:
            f.write(FIXTURE)
    with open(os.path.join(build, 'targets.json'), 'w') as f:
        json.dump({'halfling': [lib], 'halfling_tutorial': [sched]}, f)
    for name, path in (('test_framework', lib), ('test_kernels', sched)):
        with open(os.path.join(build, 'tests', name), 'w') as f:
            f.write(f"#!/bin/sh\ngrep -q 'x < 0)' {path} && grep -q 'x + 1;' {path}\n")
        os.chmod(os.path.join(build, 'tests', name), 0o755)
    commands = [{'directory': build, 'file': lib, 'command': f'c++ -o CMakeFiles/halfling.dir/lib.cpp.o -c {lib}'},
                {'directory': build, 'file': sched,
                 'command': f'c++ -o tutorials/CMakeFiles/halfling_tutorial.dir/sched.cpp.o -c {sched}'}]
    calls = os.path.join(build, 'calls.jsonl')

    def default_run(path):
        if os.path.exists(calls):
            os.remove(calls)
        r = subprocess.run([sys.executable, SCRIPT, path, '--build-dir', build], capture_output=True, text=True,
                           env=env)
        return r, [json.loads(line) for line in open(calls)] if os.path.exists(calls) else []

    # Without compile_commands.json: the halfling target, which does not compile sched.cpp: refused
    # (before the canary every one of its mutants survived, with no warning).
    r, argv = default_run(lib)
    check(r.returncode == 0 and '5 killed, 1 survived, 0 did not compile' in r.stdout,
          f'the default commands in a folder with a space: {r.stdout} {r.stderr}')
    check(argv and all(a == ['--build', build, '--target', 'halfling', '-j2'] for a in argv),
          f'the default build of a file of the halfling target: {argv}')
    r, argv = default_run(sched)
    quoted = shlex.quote(build)
    check(r.returncode != 0 and f'{sched} is not compiled by the build command (cmake --build {quoted} '
          f'--target halfling -j2)' in r.stderr and f'--build-cmd "cmake --build {quoted} -j2"' in r.stderr,
          f'a file outside the halfling target, without compile_commands.json: {r.stderr}')
    check('mutants' not in r.stdout and open(sched).read() == FIXTURE, f'refused after it started: {r.stdout}')

    # With it: every target for sched.cpp, the halfling target still for lib.cpp.
    with open(os.path.join(build, 'compile_commands.json'), 'w') as f:
        json.dump(commands, f)
    r, argv = default_run(sched)
    check(r.returncode == 0 and 'not in the halfling target alone' in r.stdout
          and '5 killed, 1 survived, 0 did not compile' in r.stdout,
          f'a file outside the halfling target, with compile_commands.json: {r.stdout} {r.stderr}')
    check(argv and all(a == ['--build', build, '-j2'] for a in argv), f'its default build: {argv}')
    r, argv = default_run(lib)
    check(r.returncode == 0 and argv and all(a == ['--build', build, '--target', 'halfling', '-j2'] for a in argv),
          f'a file of the halfling target, with compile_commands.json: {argv} {r.stderr}')
    check(open(lib).read() == FIXTURE and open(sched).read() == FIXTURE, 'a default run changed a file')

print(f'{len(failures)} failure(s)' if failures else 'mutate.py: all checks passed')
sys.exit(1 if failures else 0)
