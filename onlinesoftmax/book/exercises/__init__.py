"""The book's helpers: the exercises and their graders: Python exercises per chapter, the CUDA kernel exercises (tasks, runner, emulator or GPU), the grading rules and feedback."""
