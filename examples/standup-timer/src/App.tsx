import { useEffect, useState } from "react";
import "./styles.css";

const DEFAULT_SECONDS = 90;

type Speaker = { name: string; done: boolean };

function format(seconds: number): string {
  const m = Math.floor(seconds / 60);
  const s = seconds % 60;
  return `${m}:${s.toString().padStart(2, "0")}`;
}

export default function App() {
  const [speakers, setSpeakers] = useState<Speaker[]>([
    { name: "Ana", done: false },
    { name: "Ben", done: false },
    { name: "Chloé", done: false },
  ]);
  const [current, setCurrent] = useState(0);
  const [left, setLeft] = useState(DEFAULT_SECONDS);
  const [running, setRunning] = useState(false);

  useEffect(() => {
    if (!running) return;
    const id = setInterval(() => setLeft((l) => (l > 0 ? l - 1 : 0)), 1000);
    return () => clearInterval(id);
  }, [running]);

  function next() {
    setSpeakers((list) => list.map((s, i) => (i === current ? { ...s, done: true } : s)));
    setCurrent((c) => Math.min(c + 1, speakers.length - 1));
    setLeft(DEFAULT_SECONDS);
  }

  function reset() {
    setSpeakers((list) => list.map((s) => ({ ...s, done: false })));
    setCurrent(0);
    setLeft(DEFAULT_SECONDS);
    setRunning(false);
  }

  const allDone = speakers.every((s) => s.done);

  return (
    <div className="standup">
      <h1>Standup timer</h1>
      <p className={left === 0 ? "time over" : "time"}>{format(left)}</p>
      <p className="speaker">{allDone ? "Everyone has spoken" : `Now: ${speakers[current].name}`}</p>
      <div className="controls">
        <button onClick={() => setRunning((r) => !r)}>{running ? "Pause" : "Start"}</button>
        <button onClick={next} disabled={allDone}>Next speaker</button>
        <button onClick={reset}>Reset</button>
      </div>
      <ul>
        {speakers.map((s) => (
          <li key={s.name} className={s.done ? "done" : ""}>{s.name}</li>
        ))}
      </ul>
    </div>
  );
}
