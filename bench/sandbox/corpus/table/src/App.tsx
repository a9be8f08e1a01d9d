import { useMemo, useState } from "react";

type Row = { id: number; name: string; score: number };

function makeRows(n: number): Row[] {
  const rows: Row[] = [];
  let seed = 7;
  for (let i = 0; i < n; i++) {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    rows.push({ id: i, name: `player-${i.toString(36)}`, score: seed % 1000 });
  }
  return rows;
}

export default function App() {
  const [desc, setDesc] = useState(true);
  const rows = useMemo(() => makeRows(300), []);
  const sorted = useMemo(() => [...rows].sort((a, b) => (desc ? b.score - a.score : a.score - b.score)), [rows, desc]);
  const mean = rows.reduce((s, r) => s + r.score, 0) / rows.length;
  return (
    <section>
      <header>
        <h2>Leaderboard</h2>
        <p>mean {mean.toFixed(1)}</p>
        <button onClick={() => setDesc((d) => !d)}>{desc ? "lowest first" : "highest first"}</button>
      </header>
      <table>
        <tbody>
          {sorted.map((r, i) => (
            <tr key={r.id}>
              <td>{i + 1}</td>
              <td>{r.name}</td>
              <td>{r.score}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}
