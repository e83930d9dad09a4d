"""Stage 4, evaluation: `verl-p40 eval`: answers generated (`generation`), scored with the training reward, compared
with paired sign tests (`stats`), and the training curves drawn; eval's options
(`options`) are taken whole."""
