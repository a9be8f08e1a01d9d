export type Todo = { id: number; text: string; done: boolean };

export type Action =
  | { type: "add"; text: string }
  | { type: "toggle"; id: number }
  | { type: "clear" };

let nextId = 1;

export function reducer(todos: Todo[], action: Action): Todo[] {
  switch (action.type) {
    case "add":
      return [...todos, { id: nextId++, text: action.text, done: false }];
    case "toggle":
      return todos.map((t) => (t.id === action.id ? { ...t, done: !t.done } : t));
    case "clear":
      return todos.filter((t) => !t.done);
  }
}

export const seed: Todo[] = ["Write the agenda", "Review the snippet", "Ship the relay"].map((text) => ({
  id: nextId++,
  text,
  done: false,
}));
