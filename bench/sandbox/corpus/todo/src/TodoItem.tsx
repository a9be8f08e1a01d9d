import type { Todo } from "./store";

type Props = { todo: Todo; onToggle: (id: number) => void };

export function TodoItem({ todo, onToggle }: Props) {
  return (
    <li className={todo.done ? "done" : ""}>
      <label>
        <input type="checkbox" checked={todo.done} readOnly />
        <span onClick={() => onToggle(todo.id)}>{todo.text}</span>
      </label>
    </li>
  );
}
