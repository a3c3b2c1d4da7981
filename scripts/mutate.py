#!/usr/bin/env python3
"""Mutation testing for halfling's C++ sources: does the test suite notice when the code is wrong?

The script makes one small change at a time to a source file (a mutant: `<` for `<=`, `-` for `+`,
`&&` for `||`, 1 for 0, an assignment deleted, ...), rebuilds, and runs a test command. A mutant the
tests fail on is *killed*; one they pass is a *survivor*: either the change makes no difference (an
equivalent mutant, e.g. a flag set to 2 where only "non-zero" is read) or no test checks what that
line does, which is a missing test. docs/hardening.md tells what the sweeps found and how to read a
survivor.

    scripts/mutate.py framework/amp.cpp --build-dir build-mut --sample 40
    scripts/mutate.py kernels/cpu/gemm_cpu.cpp --lines 150-170 --list     # only show the mutants
    scripts/mutate.py framework/ops.cpp --log new.jsonl --skip-done old.jsonl  # only what old.jsonl lacks
    scripts/mutate.py framework/optim.cpp --since b5aea68       # only the lines written since that commit

Use a CPU-only build (-DHALFLING_CUDA=OFF) of its own: the library is shared, so a mutant of a .cpp
costs one compile and one link. A header (.h) rebuilds everything that includes it, tests too. The
default build command builds every target for a header, and for a .cpp that the build's
compile_commands.json does not put in the halfling target alone (a tutorials/common/ or bench/ file, a
file it does not list); the halfling target only otherwise, also when the build has no
compile_commands.json (the canary below then tells if that target does not compile the file).

Before the first mutant the script builds a canary: the file with an `#error` line at its top. If
that build still succeeds, the build command does not compile the file (a .cu in a CPU-only build, or a
--build-cmd that builds another target), every mutant would survive, and the script refuses to start;
--build-cmd gives a command that does compile it.

The file is restored after every run, also on Ctrl-C, SIGTERM or SIGHUP (the exit status is then
128 + the signal, as a shell reports it); a copy of the original is kept in FILE.mutate-orig while
the run lasts, so that even a killed run loses nothing (the next run refuses to start until that
copy has been put back). Standard library only.
"""
import argparse
import json
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import threading
import time

# (pattern, replacements). Relational operators need a space on both sides, as clang-format writes
# them: that leaves template brackets (static_cast<float>) and shifts alone.
OPERATORS = [
    (r'(?<=\s)<=(?=\s)', ['<']),
    (r'(?<=\s)<(?=\s)', ['<=']),
    (r'(?<=\s)>=(?=\s)', ['>']),
    (r'(?<=\s)>(?=\s)', ['>=']),
    (r'==', ['!=']),
    (r'!=', ['==']),
    (r'&&', ['||']),
    (r'\|\|', ['&&']),
    (r'(?<=\s)\+(?=\s)', ['-']),
    (r'(?<=\s)-(?=\s)', ['+']),
    (r'(?<=\s)\*(?=\s)', ['/']),
    (r'(?<=\s)/(?=\s)', ['*']),
    (r'\+=', ['-=']),
    (r'-=', ['+=']),
    (r'\*=', ['/=']),
    (r'\+\+', ['--']),
    (r'\btrue\b', ['false']),
    (r'\bfalse\b', ['true']),
    (r'(?<![\w.])0(?![\w.])', ['1']),
    (r'(?<![\w.])1(?![\w.])', ['0', '2']),
    (r'(?<![\w.])2(?![\w.])', ['1', '3']),
    (r'\bstd::max\b', ['std::min']),
    (r'\bstd::min\b', ['std::max']),
]
# Lines left alone: preprocessor, declarations of templates, messages (a mutant there tests the
# wording, not the arithmetic).
SKIP_LINE = re.compile(r'^\s*(#|template\b|static_assert\b)|\bthrow\b|std::cerr|printf|HL_FAIL')
# A statement that only assigns, e.g. `x += y;` or `c.kind = Kind::fixed;` (not a declaration).
ASSIGNMENT = re.compile(r'^\s*[\w\[\]().>*-]+\s*(\+=|-=|\*=|=)\s*[^=].*;\s*$')
DECLARATION = re.compile(r'^\s*(const|auto|int|int\d+_t|float|double|size_t|bool|uint\d+_t|return)\b|^\s*std::')
DELETE = '/* mutant: statement deleted */;'
# The first line of the canary: a build that compiles the file fails on it.
CANARY = '#error mutate.py canary: this file is compiled by the build command'
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def blank_strings_and_comments(line, in_block):
    """The code of one line with string literals, // and /* */ comments blanked to spaces (same
    length, so offsets still match), and whether a /* comment is still open at its end."""
    out = []
    i = 0
    in_str = False
    while i < len(line):
        if in_block:
            end = line.find('*/', i)
            if end < 0:
                out.append(' ' * (len(line) - i))
                return ''.join(out), True
            out.append(' ' * (end + 2 - i))
            i = end + 2
            in_block = False
            continue
        c = line[i]
        if in_str:
            if c == '\\':
                out.append('  ')
                i += 2
                continue
            if c == '"':
                in_str = False
            out.append(' ')
        elif line.startswith('//', i):
            out.append(' ' * (len(line) - i))
            break
        elif line.startswith('/*', i):
            in_block = True
            out.append('  ')
            i += 2  # past the opening, so that "/*/" does not close it
            continue
        elif c == '"':
            in_str = True
            out.append(' ')
        elif c == "'":
            end = line.find("'", i + 2 + (line[i + 1:i + 2] == '\\'))  # 'x' or '\x', '\'' too
            end = len(line) - 1 if end < 0 else end
            out.append(' ' * (end + 1 - i))
            i = end + 1
            continue
        else:
            out.append(c)
        i += 1
    return ''.join(out)[:len(line)], in_block


def mutants(text, first=1, last=None, only=None):
    """Every mutant of `text` whose line is in [first, last] (1-based) and, when `only` is a set of line
    numbers, in it: (line, start, end, new)."""
    found = []
    in_block = False
    for index, line in enumerate(text.split('\n')):
        number = index + 1
        code, in_block_after = blank_strings_and_comments(line, in_block)
        in_block = in_block_after
        if number < first or (last is not None and number > last) or (only is not None and number not in only) \
                or SKIP_LINE.search(code):
            continue
        for pattern, replacements in OPERATORS:
            for m in re.finditer(pattern, code):
                for new in replacements:
                    found.append((number, m.start(), m.end(), new))
        if ASSIGNMENT.match(code) and not DECLARATION.match(code):
            found.append((number, -1, -1, DELETE))
    return found


def lines_since(path, rev):
    """The numbers of the lines of `path`, as it is on disk now, that are new or changed since the git
    revision `rev`: the new side of each hunk of `git diff -U0 REV -- PATH` (uncommitted changes count,
    as they are part of the file that will be mutated). A file that did not exist at `rev` is new
    throughout. Exits with a message when git cannot answer (not a repository, an unknown revision, a
    file git does not track)."""
    folder, name = os.path.split(os.path.abspath(path))
    def git(*argv):
        return subprocess.run(['git', '-C', folder, *argv], capture_output=True, text=True, errors='replace')
    r = git('rev-parse', '--verify', '--quiet', rev + '^{commit}')
    if r.returncode != 0:
        sys.exit(f'mutate.py: --since {rev}: not a commit of the git repository around {path}'
                 + (f' ({r.stderr.strip()})' if r.stderr.strip() else ''))
    r = git('ls-files', '--error-unmatch', '--', name)
    if r.returncode != 0:
        sys.exit(f'mutate.py: --since {rev}: git does not track {path}, so it cannot say which lines changed')
    r = git('diff', '--no-ext-diff', '--no-color', '-U0', rev, '--', name)
    if r.returncode != 0:
        sys.exit(f'mutate.py: --since {rev}: git diff failed: {r.stderr.strip()}')
    changed = set()
    for m in re.finditer(r'^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@', r.stdout, re.M):
        start, count = int(m.group(1)), int(m.group(2) if m.group(2) is not None else 1)
        changed.update(range(start, start + count))  # a count of 0 (lines only removed) adds none
    return changed


def apply(text, mutant):
    lines = text.split('\n')
    number, start, end, new = mutant
    line = lines[number - 1]
    if new == DELETE:
        lines[number - 1] = line[:len(line) - len(line.lstrip())] + DELETE
    else:
        lines[number - 1] = line[:start] + new + line[end:]
    return '\n'.join(lines)


def changed_line(original, mutant):
    """The mutant's line as it reads once changed (stripped): what --list prints and --log records."""
    return apply(original, mutant).split('\n')[mutant[0] - 1].strip()


# How much of a command's output run() keeps: this many bytes of its start and as many of its end. A
# mutant can make a build or a test print almost without end: a sweep of 2026-12-02 kept all of it and
# was killed by the kernel's OOM killer at 23 GB, on a tile table's length multiplied instead of divided
# (the compiler then reported errors for 3.5 minutes; the run after this change recorded the mutant as
# not compiling). What is read from the output is the first failing test's name (near the start; gtest
# repeats every name at the end) and, when a build fails, its last lines.
OUTPUT_KEPT = 1 << 20


class KeptOutput:
    """The start and the end of a stream, read to its end by a thread of its own (so that the command
    never blocks on a full pipe), with how many bytes in between were left out."""

    def __init__(self, stream):
        self.head, self.tail, self.total = bytearray(), bytearray(), 0
        self.thread = threading.Thread(target=self._drain, args=(stream,), daemon=True)
        self.thread.start()

    def _drain(self, stream):
        while chunk := stream.read1(1 << 16):
            self.total += len(chunk)
            room = OUTPUT_KEPT - len(self.head)
            if room > 0:
                self.head += chunk[:room]
                chunk = chunk[room:]
            self.tail += chunk
            if len(self.tail) > 2 * OUTPUT_KEPT:  # trimmed now and then, not at every chunk
                del self.tail[:-OUTPUT_KEPT]
        stream.close()

    def text(self):
        self.thread.join()
        tail = self.tail[-OUTPUT_KEPT:]
        left_out = self.total - len(self.head) - len(tail)
        gap = f'\n[mutate.py: {left_out} bytes of output left out]\n'.encode() if left_out else b''
        # errors='replace': a mutant can make a test print bytes that are not UTF-8 (a corrupted name
        # in an error message); that is the test's output to read, not a reason for this script to stop.
        return (bytes(self.head) + gap + bytes(tail)).decode('utf-8', errors='replace')


def run(command, timeout=None):
    """(exit status, output) of a shell command, the output cut to its first and last OUTPUT_KEPT bytes;
    (None, '') when it outlives `timeout`. The command runs in a process group of its own, which is
    killed whole when it times out or the run is interrupted: a mutant that makes a test loop forever
    must not leave that test running."""
    p = subprocess.Popen(command, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         start_new_session=True)
    out = KeptOutput(p.stdout)
    try:
        p.wait(timeout=timeout)
        return p.returncode, out.text()
    except subprocess.TimeoutExpired:
        kill_group(p)
        return None, ''
    except BaseException:
        kill_group(p)
        raise


def kill_group(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:  # the group has just exited on its own
        pass
    p.wait()


def read(path):
    with open(path, newline='') as f:  # newline='': the bytes of the line endings as they are
        return f.read()


def write(path, text):
    with open(path, 'w', newline='') as f:
        f.write(text)


def only_in_halfling(path, build_dir):
    """Whether the build's compile_commands.json compiles `path` into the halfling target and nowhere
    else (False too when it does not list the file); None when there is no such file to read."""
    try:
        with open(os.path.join(build_dir, 'compile_commands.json')) as f:
            entries = json.load(f)
        outputs = []
        for e in entries:
            if os.path.realpath(os.path.join(e.get('directory', ''), e['file'])) != os.path.realpath(path):
                continue
            output = e.get('output')
            if output is None:
                words = e['arguments'] if 'arguments' in e else shlex.split(e['command'])
                output = next((b for a, b in zip(words, words[1:]) if a == '-o'), '')
            outputs.append(output)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return bool(outputs) and all(re.search(r'(^|/)CMakeFiles/halfling\.dir/', o) for o in outputs)


def build_canary(path, backup, original, build_cmd):
    """(exit status, output) of the build command with CANARY on the first line of the file. The file is
    put back whatever happens, as for a mutant: FILE.mutate-orig holds the original meanwhile, and a
    signal that comes while the original is being written back waits until it is."""
    newline = '\r\n' if '\r\n' in original else '\n'
    write(backup, original)
    try:
        write(path, CANARY + newline + original)
        return run(build_cmd)
    finally:
        held = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
        write(path, original)
        os.remove(backup)
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def read_done(log):
    """The mutants a --log file records, as (file, line, original, mutant)."""
    if not os.path.isfile(log):
        sys.exit(f'mutate.py: --skip-done {log}: no such file')
    done = set()
    with open(log) as f:
        for number, text in enumerate(f, 1):
            try:
                r = json.loads(text)
                done.add((os.path.normpath(r['file']), int(r['line']), r['original'], r['mutant']))
            except (ValueError, KeyError, TypeError):
                sys.exit(f'mutate.py: --skip-done {log}:{number}: not a line that --log writes')
    return done


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('file', help='the C++ source file to mutate')
    ap.add_argument('--build-dir', default='build', help='a configured CMake build (default: build)')
    ap.add_argument('--build-cmd', help='rebuild command (default: the halfling target for a .cpp that '
                    'compile_commands.json puts there, everything otherwise); the run refuses to start if '
                    'it does not compile the file')
    ap.add_argument('--test', help='test command; non-zero exit kills a mutant (default: test_framework '
                    'and test_kernels, stopping at the first failure)')
    ap.add_argument('--lines', help='FIRST-LAST: only mutate these lines')
    ap.add_argument('--since', metavar='REV', help='only mutate the lines that are new or changed since this git '
                    'revision (uncommitted changes included); with --lines, only those of the range')
    ap.add_argument('--sample', type=int, help='run a random sample of this many mutants (default: all)')
    ap.add_argument('--seed', type=int, default=1, help='seed of the sample (default 1)')
    ap.add_argument('--timeout', type=float, default=300, help='seconds before a test run counts as '
                    'hung, which kills the mutant (default 300)')
    ap.add_argument('--log', help='append one JSON line per mutant to this file')
    ap.add_argument('--skip-done', action='append', default=[], metavar='LOG',
                    help='leave out the mutants a --log file of an earlier run already holds (its file, line, '
                    'original line and mutant all equal); may be given more than once')
    ap.add_argument('--list', action='store_true', help='print the mutants and exit')
    args = ap.parse_args()

    path = args.file
    if not os.path.isfile(path):
        sys.exit(f'mutate.py: {path}: no such file')
    first, last = 1, None
    if args.lines:
        m = re.fullmatch(r'(\d+)-(\d+)', args.lines)
        if not m or int(m.group(1)) > int(m.group(2)):
            sys.exit(f'mutate.py: --lines {args.lines}: expected FIRST-LAST, e.g. 40-80')
        first, last = int(m.group(1)), int(m.group(2))
    if args.sample is not None and args.sample < 1:
        sys.exit(f'mutate.py: --sample {args.sample}: must be >= 1')
    if args.timeout <= 0:
        sys.exit(f'mutate.py: --timeout {args.timeout}: must be > 0')
    backup = path + '.mutate-orig'
    if os.path.exists(backup) and not args.list:
        # Checked first: after a killed run the file itself may still hold a mutant.
        sys.exit(f'mutate.py: {backup} exists: an earlier run was interrupted. Compare it with {path}, '
                 f'put the original back (mv {backup} {path}) and run again.')
    done = set()
    for log in args.skip_done:
        done |= read_done(log)
    original = read(path)
    only = lines_since(path, args.since) if args.since else None
    chosen = mutants(original, first, last, only)
    if done:
        # Keyed on the text of the line before and after, not on the line number alone: a mutant
        # recorded before the file changed around it is not taken for one that was run.
        lines = original.split('\n')
        chosen = [m for m in chosen
                  if (os.path.normpath(path), m[0], lines[m[0] - 1].strip(), changed_line(original, m)) not in done]
    if args.sample is not None and args.sample < len(chosen):
        chosen = sorted(random.Random(args.seed).sample(chosen, args.sample))
    if args.list:
        for mutant in chosen:
            print(f'{path}:{mutant[0]}: {changed_line(original, mutant)}')
        return 0

    build_dir = args.build_dir
    header = path.endswith(('.h', '.cuh', '.hpp'))
    build_all = f'cmake --build {shlex.quote(build_dir)} -j2'
    build_cmd = args.build_cmd
    if build_cmd is None:
        if header or only_in_halfling(path, build_dir) is False:
            build_cmd = build_all
            if not header:
                print(f'mutate.py: {path} is not in the halfling target alone (per {build_dir}/compile_commands.json): '
                      f'building every target', flush=True)
        else:
            build_cmd = f'cmake --build {shlex.quote(build_dir)} --target halfling -j2'
    tests = [shlex.quote(os.path.join(build_dir, 'tests', t)) for t in ('test_framework', 'test_kernels')]
    test_cmd = args.test or ' && '.join(f'{t} --gtest_fail_fast --gtest_brief=1' for t in tests)
    # Ctrl-C, SIGTERM and a closed terminal all end the run the same way: the tests running now are
    # killed (they are in a session of their own, out of the terminal's reach) and the file restored.
    def stop(signum, _frame):
        raise KeyboardInterrupt(signum)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)

    try:
        rc, out = run(build_cmd)
        if rc != 0:
            sys.exit(f'mutate.py: the build fails before any mutant ({build_cmd}):\n{out[-2000:]}')
        # The canary comes after a build that succeeds, so that its build can fail for one reason only.
        rc, out = build_canary(path, backup, original, build_cmd)
        if rc == 0:
            hint = f', e.g. --build-cmd "{build_all}" for every target' if build_cmd != build_all else ''
            if path.endswith(('.cu', '.cuh')):
                hint += '. A .cu file needs a build configured with -DHALFLING_CUDA=ON'
            sys.exit(f'mutate.py: {path} is not compiled by the build command ({build_cmd}): it still succeeds '
                     f'with "{CANARY}" at the top of the file, so every mutant would survive. Give one that '
                     f'compiles the file with --build-cmd{hint}.')
        rc, out = run(test_cmd, args.timeout)
        if rc != 0:
            sys.exit(f'mutate.py: the tests fail (or hang) without a mutant ({test_cmd}): fix that first.\n'
                     f'{out[-2000:]}')
    except KeyboardInterrupt as e:  # the file is as it was: only the canary's build changed it, and put it back
        print('mutate.py: interrupted before the first mutant', file=sys.stderr)
        return 128 + (e.args[0] if e.args and isinstance(e.args[0], int) else signal.SIGINT)

    # From here on the file may hold a mutant: keep the original beside it, and put it back however
    # the run ends.
    write(backup, original)
    interrupted = None
    counts = {'killed': 0, 'survived': 0, 'invalid': 0}
    survivors = []
    print(f'{path}: {len(chosen)} mutants', flush=True)
    try:
        for mutant in chosen:
            start = time.time()
            mutated = apply(original, mutant)
            write(path, mutated)
            rc, out = run(build_cmd)
            if rc != 0:
                status, by = 'invalid', 'does not compile'
            else:
                rc, out = run(test_cmd, args.timeout)
                if rc == 0:
                    status, by = 'survived', ''
                else:
                    failed = re.findall(r'\[  FAILED  \] (\S+)', out)
                    status = 'killed'
                    by = failed[0] if failed else ('timeout' if rc is None else f'exit status {rc}')
            counts[status] += 1
            line = mutated.split('\n')[mutant[0] - 1].strip()
            record = {'file': path, 'line': mutant[0], 'status': status, 'by': by,
                      'original': original.split('\n')[mutant[0] - 1].strip(), 'mutant': line,
                      'seconds': round(time.time() - start, 1)}
            if status == 'survived':
                survivors.append(record)
            print(f"{status:8} {path}:{mutant[0]}: {line}" + (f'  [{by}]' if by else ''), flush=True)
            if args.log:
                with open(args.log, 'a') as f:
                    f.write(json.dumps(record) + '\n')
    except KeyboardInterrupt as e:
        interrupted = e.args[0] if e.args and isinstance(e.args[0], int) else signal.SIGINT
        print('mutate.py: interrupted; restoring the file', file=sys.stderr)
    finally:
        for sig in SIGNALS:  # a second signal must not cut this short
            signal.signal(sig, signal.SIG_IGN)
        write(path, original)
        os.remove(backup)
        rc, out = run(build_cmd)  # leave the build as the source is
        if rc != 0:
            print(f'mutate.py: the file is restored, but rebuilding it failed ({build_cmd}): rebuild by hand.\n'
                  f'{out[-2000:]}', file=sys.stderr)
    print(f"{path}: {counts['killed']} killed, {counts['survived']} survived, {counts['invalid']} "
          f"did not compile")
    for r in survivors:
        print(f"  survived {path}:{r['line']}: {r['original']}  ->  {r['mutant']}")
    return 128 + int(interrupted) if interrupted is not None else 0  # as a shell reports a signal


if __name__ == '__main__':
    sys.exit(main())
