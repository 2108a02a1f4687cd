#!/usr/bin/env python3
"""Print the C table of code point ranges that Python's str.isprintable() rejects.

user/pyfmt.c embeds its output (between the BEGIN/END markers), so that repr() of a
string in C escapes exactly what the reference's Python escapes. Regenerate it when
the Python that runs the reference moves to a new Unicode version:

    python3 tests/readers/gen_printable.py
"""
import sys
import unicodedata


def ranges():
    found, start = [], None
    for cp in range(0x110000):
        bad = not chr(cp).isprintable()
        if bad and start is None:
            start = cp
        elif not bad and start is not None:
            found.append((start, cp - 1))
            start = None
    if start is not None:
        found.append((start, 0x10FFFF))
    return found


def main():
    pairs = [f"{{0x{a:x}, 0x{b:x}}}" for a, b in ranges()]
    print(f"/* BEGIN generated: Unicode {unicodedata.unidata_version}, "
          f"Python {sys.version.split()[0]} */")
    print("static const uint32_t nonprintable[][2] = {")
    for i in range(0, len(pairs), 6):
        print("    " + ", ".join(pairs[i:i + 6]) + ",")
    print("};")
    print("/* END generated */")


if __name__ == "__main__":
    main()
