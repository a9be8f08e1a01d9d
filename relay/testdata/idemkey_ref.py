#!/usr/bin/env python3
"""Reference implementation of relay's canonical encoding and keys, written
from the doc comment of relay.SnippetKey alone; it produced idemkey.golden.json.

    python3 idemkey_ref.py > idemkey.golden.json
"""
import hashlib
import json


def ns(s):
    b = s.encode("utf-8") if isinstance(s, str) else s
    return str(len(b)).encode() + b":" + b + b","


def files_enc(files):
    out = ns(str(len(files)))
    for p in sorted(files, key=lambda p: p.encode("utf-8")):  # byte order
        out += ns(p) + ns(files[p])
    return out


def snippet(room, name, files):
    return ns("roomrelay-snippet-v1") + ns(room) + ns(name) + files_enc(files)


def content_hash(files):
    return hashlib.sha256(ns("roomrelay-files-v1") + files_enc(files)).hexdigest()


def repo(room, name, repo_id, version):
    return ns("roomrelay-repo-v1") + ns(room) + ns(name) + ns(repo_id) + ns(version)


APP = 'export default function App() {\n  return <div className="timer">15:00</div>\n}\n'
CSS = ".timer { font-size: 4rem; }\n"

SNIPPETS = [
    ("r1", "Timer", {"src/App.tsx": "x"}),
    ("", "", {}),
    ("room-1", "Standup timer", {"src/App.tsx": APP, "src/styles.css": CSS}),
    ("room-1", "Standup timer", {"src/App.tsx": APP, "src/styles.css": CSS + " "}),
    ("room-2", "Standup timer", {"src/App.tsx": APP, "src/styles.css": CSS}),
    ("ab", "c", {"src/App.tsx": ""}),
    ("a", "bc", {"src/App.tsx": ""}),
    ("r", "Ünïcode ☕", {"src/App.tsx": "// é\n", "src/caf\u00e9.ts": "1", "src/cafe\u0301.ts": "2",
                        "src/\U0001F600.ts": "3", "src/\uff41.ts": "4", "src/Z.ts": "5"}),
]

REPOS = [
    ("room-1", "Big app", "repo-42", "v1.2.3"),
    ("room-1", "Big app", "repo-42", "v1.2.4"),
    ("", "", "", ""),
]

out = {"snippets": [], "repos": []}
for room, name, files in SNIPPETS:
    c = snippet(room, name, files)
    out["snippets"].append({
        "room_id": room, "name": name, "files": files,
        "canonical": c.decode("utf-8"),
        "key": "snip-" + hashlib.sha256(c).hexdigest()[:32],
        "content_hash": content_hash(files),
    })
for room, name, repo_id, version in REPOS:
    out["repos"].append({
        "room_id": room, "name": name, "repository_id": repo_id, "version_id": version,
        "key": "repo-" + hashlib.sha256(repo(room, name, repo_id, version)).hexdigest()[:32],
    })
print(json.dumps(out, indent=2, ensure_ascii=False))
