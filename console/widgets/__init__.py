"""Widgets: each renders part of a :class:`console.state.ConsoleSnapshot` and holds no other state
(the log view also keeps the lines it shows). Colours come from component classes that
``themes/*.tcss`` style."""
