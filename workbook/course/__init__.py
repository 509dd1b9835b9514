"""The course's own machinery: exercise checking, learner progress, notebook generation, nbgrader, the test scheduler."""
