// A Node program in a process of its own, its output read line by line.
"use strict";
const { spawn } = require("node:child_process");
const readline = require("node:readline");

class Program {
  constructor(file, args, env) {
    this.proc = spawn(process.execPath, [file, ...args], { env, stdio: ["ignore", "pipe", "pipe"] });
    this.seen = [];
    this.waiting = null;
    this.exited = new Promise((resolve) => this.proc.on("exit", (code) => resolve(code)));
    for (const out of [this.proc.stdout, this.proc.stderr]) {
      readline.createInterface({ input: out }).on("line", (line) => {
        this.seen.push(line);
        if (this.waiting) this.waiting();
      });
    }
  }

  // Resolves with the match of the first line from `from` on that matches `pattern`.
  async until(pattern, timeoutMs = 90000) {
    const deadline = Date.now() + timeoutMs;
    for (let i = this.read || 0; ; ) {
      for (; i < this.seen.length; i += 1) {
        const found = this.seen[i].match(pattern);
        if (found) {
          this.read = i + 1;
          return found;
        }
      }
      if (this.proc.exitCode !== null || Date.now() > deadline) {
        throw new Error(`no line like ${pattern} in:\n${this.seen.join("\n")}`);
      }
      await new Promise((resolve) => {
        this.waiting = resolve;
        setTimeout(resolve, 500);
      });
    }
  }

  kill(signal) { this.proc.kill(signal); }
}

module.exports = { Program };
