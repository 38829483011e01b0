// Finds the `nn.Module` class whose definition encloses a line of a Python file, for "generate kernel here".

export interface ModuleClass {
  className: string;
  /** 0-based line of the `class` statement. */
  line: number;
}

const CLASS_LINE = /^(\s*)class\s+([A-Za-z_]\w*)\s*\(([^)]*)\)\s*:/;

function indentOf(line: string): number {
  return line.length - line.trimStart().length;
}

/** True when the base list names a torch module (`nn.Module`, `torch.nn.Module` or a bare imported `Module`). */
function isModuleBase(bases: string): boolean {
  return bases.split(',').some((base) => /(^|\.)Module$/.test(base.trim()));
}

/**
 * The innermost `class X(nn.Module)` whose body contains `line` (or whose header is on it); a class ends at
 * the first non-blank line indented no deeper than its `class` keyword. Undefined when the cursor is outside.
 */
export function findModuleClassAt(text: string, line: number): ModuleClass | undefined {
  const lines = text.split(/\r?\n/);
  if (line < 0 || line >= lines.length) {
    return undefined;
  }
  for (let start = line; start >= 0; start--) {
    const match = CLASS_LINE.exec(lines[start]);
    if (!match || !isModuleBase(match[3])) {
      continue;
    }
    const classIndent = match[1].length;
    let end = start + 1;
    while (end < lines.length && (lines[end].trim() === '' || indentOf(lines[end]) > classIndent)) {
      end++;
    }
    if (line < end) {
      return { className: match[2], line: start };
    }
  }
  return undefined;
}
