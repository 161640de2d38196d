"""The command-line interface. Commands are thin: parse, call one engine function, render."""
