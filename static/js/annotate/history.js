// Undo and redo over snapshots of the image's label list. A snapshot is
// {labels, decided}: the labels, and what was decided about model suggestions
// (id → "accepted" | "rejected"), so undoing an accept also brings its suggestion back.

import { cloneLabels } from "./shapes.js";

const LIMIT = 500;

function copy(snapshot) {
  return { labels: cloneLabels(snapshot.labels), decided: { ...snapshot.decided } };
}

export class History {
  constructor(initial) {
    this.states = [copy(initial)];
    this.at = 0;
  }

  /** Records a new state after the current one; anything that was undone is dropped. */
  push(snapshot) {
    this.states.length = this.at + 1;
    this.states.push(copy(snapshot));
    if (this.states.length > LIMIT) this.states.shift();
    this.at = this.states.length - 1;
  }

  /** Replaces the current state in place (the server's stored form of the same labels). */
  replace(snapshot) {
    this.states[this.at] = copy(snapshot);
  }

  current() {
    return copy(this.states[this.at]);
  }

  canUndo() {
    return this.at > 0;
  }

  canRedo() {
    return this.at < this.states.length - 1;
  }

  undo() {
    if (!this.canUndo()) return null;
    this.at -= 1;
    return this.current();
  }

  redo() {
    if (!this.canRedo()) return null;
    this.at += 1;
    return this.current();
  }
}
