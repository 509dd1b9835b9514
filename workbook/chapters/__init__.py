"""The code behind chapter cells that is not an op library: figures, demos, small measurements (see workbook/README.md)."""
