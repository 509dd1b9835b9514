"""One loader per library or program under csrc/ (and chapter 11's Triton kernels): see workbook/README.md."""
