import { useEffect, useReducer, useState } from "react";
import { reducer, seed } from "./store";
import { TodoItem } from "./TodoItem";
import "./styles.css";

export default function App() {
  const [todos, dispatch] = useReducer(reducer, seed);
  const [saved, setSaved] = useState(false);

  useEffect(() => {
    setSaved(false);
    const id = setTimeout(() => setSaved(true), 500);
    return () => clearTimeout(id);
  }, [todos]);

  const left = todos.filter((t) => !t.done).length;
  return (
    <main>
      <h1>Todos ({left} left)</h1>
      <ul>
        {todos.map((t) => (
          <TodoItem key={t.id} todo={t} onToggle={(id) => dispatch({ type: "toggle", id })} />
        ))}
      </ul>
      <button onClick={() => dispatch({ type: "add", text: `Item ${todos.length + 1}` })}>Add</button>
      <button onClick={() => dispatch({ type: "clear" })}>Clear done</button>
      <small>{saved ? "saved" : "saving…"}</small>
    </main>
  );
}
