! ERROR STOP on one image ends every image, with the stop code as exit status, even
! while the others wait in SYNC ALL.
program caf_errstop
  implicit none
  if (this_image() == 2) error stop 3
  sync all
  print '(a)', 'FAIL: SYNC ALL completed without image 2'
end program
